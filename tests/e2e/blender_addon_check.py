# Run inside Blender (blender -b --factory-startup --python THIS -- ZIP URL): installs the Tessera
# add-on from its zip as an artist would, generates through a running `tessera serve`, and prints
# one JSON line "RESULT {...}" with what ended up in the scene (tests/e2e/blender_addon_test.cpp).
import json
import sys

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
