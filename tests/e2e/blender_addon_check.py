# Run inside Blender (blender -b --factory-startup --python THIS -- ZIP URL): installs the Tessera
# add-on from its zip as an artist would, generates through a running `tessera serve`, and prints
# one JSON line "RESULT {...}" with what ended up in the scene (tests/e2e/blender_addon_test.cpp).
import json
import sys
import time

import bpy

zip_path, url = sys.argv[sys.argv.index("--") + 1:][:2]
bpy.ops.preferences.addon_install(filepath=zip_path, overwrite=True)
bpy.ops.preferences.addon_enable(module="tessera")
import tessera  # noqa: E402  (installed just above)

prefs = bpy.context.preferences.addons["tessera"].preferences
prefs.url = url
report = {"panel": hasattr(bpy.types, "TESSERA_PT_panel"),
          "operator": hasattr(bpy.ops.tessera, "generate")}
job = tessera.generate_blocking(url, prefs.token, "a chair", seed=3, variations=2, resolution=33,
                                height=1.5, preset="blender")
bpy.context.view_layer.update()  # dimensions are read from the evaluated objects
report["state"] = job.state
report["objects"] = []
for candidate, obj in sorted(job.objects.items()):
    report["objects"].append({
        "name": obj.name,
        "candidate": candidate,
        "prompt": obj.get("tessera_prompt"),
        "seed": obj.get("tessera_seed"),
        "triangles": len(obj.data.polygons),
        "height": obj.dimensions.z,
        "x": obj.location.x,
    })
# Paint selected: a UV sphere (with Blender's own uvs) off the origin, painted on the embedded image
# model; the textured copy comes back where the sphere is, its image on the base colour.
bpy.ops.mesh.primitive_uv_sphere_add(segments=24, ring_count=12, radius=0.5, location=(3, 1, 0.5))
sphere = bpy.context.active_object
report["paint_operator"] = hasattr(bpy.ops.tessera, "paint")
paint = tessera.paint_blocking(url, prefs.token, sphere, "a red ball", seed=2, steps=2, views=2,
                               view_size=64)
report["paint_state"] = paint.state
report["paint_error"] = paint.error
if paint.painted is not None:
    bpy.context.view_layer.update()
    p = paint.painted
    corners = [p.matrix_world @ v.co for v in p.data.vertices]
    images = [l.from_node.image for m in p.data.materials if m and m.use_nodes
              for l in m.node_tree.links if l.to_node.type == "BSDF_PRINCIPLED"
              and l.to_socket.name == "Base Color" and l.from_node.type == "TEX_IMAGE"
              and l.from_node.image]
    report["painted"] = {
        "name": p.name,
        "triangles": len(p.data.polygons),
        "sphere_triangles": sum(len(f.vertices) - 2 for f in sphere.data.polygons),
        "centre": [sum(c[i] for c in corners) / len(corners) for i in range(3)],
        "image": list(images[0].size) if images else [],
        "packed": bool(images) and images[0].packed_file is not None,
        "prompt": p.get("tessera_paint_prompt"),
    }
# The panel's Paint button: the operator submits, a thread follows the stream and fetches the
# result, and the main thread's timer (called here as Blender's event loop would) imports it.
bpy.ops.object.select_all(action="DESELECT")
sphere.select_set(True)
bpy.context.view_layer.objects.active = sphere
settings = bpy.context.scene.tessera
settings.paint_prompt = "a green ball"
settings.paint_views = 1
report["panel_paint_operator"] = list(bpy.ops.tessera.paint())
panel_job = tessera._Running.job
deadline = time.time() + 300
while tessera._Running.job is not None and time.time() < deadline:
    tessera._poll_events()
    time.sleep(0.05)
report["panel_paint"] = {
    "status": settings.status,
    "fetched_in_background": bool(panel_job and panel_job.fetched_in_background),
    "painted": panel_job.painted.name if panel_job and panel_job.painted else "",
}
# The server gone: a message that says how to start it.
try:
    tessera.generate_blocking("http://127.0.0.1:9", "", "a cube")
    report["unreachable"] = "no error"
except tessera.TesseraError as e:
    report["unreachable"] = str(e)
# A bad request: the server's own words.
try:
    tessera.submit(url, prefs.token, "a cube", variations=99)
    report["refused"] = "no error"
except tessera.TesseraError as e:
    report["refused"] = str(e)
print("RESULT " + json.dumps(report))
sys.stdout.flush()
