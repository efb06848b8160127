# The README's picture of the Blender add-on (docs/blender-addon.png): run by blender_panel.sh, which
# starts Blender under Xvfb with this script, clicks the splash away and the Tessera tab open with
# xdotool as a person would, and lets this script take the screenshot once two chairs are in.
import sys, bpy
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "integrations", "blender"))
import tessera
tessera.register()
url = sys.argv[sys.argv.index("--") + 1]
out = sys.argv[sys.argv.index("--") + 2]
for o in list(bpy.data.objects):
    bpy.data.objects.remove(o)
s = bpy.context.scene.tessera
s.prompt = "a chair"; s.variations = 2; s.random_seed = False; s.seed = 3; s.height = 1.5
job = tessera.generate_blocking(url, "", "a chair", seed=3, variations=2, resolution=65, height=1.5)
s.status = "Done: %d object(s)" % len(job.objects)
state = {"n": 0}
def step():
    state["n"] += 1
    for area in bpy.context.screen.areas:
        if area.type == "VIEW_3D":
            sp = area.spaces.active
            sp.show_region_ui = True
            sp.shading.type = "SOLID"
            with bpy.context.temp_override(area=area, region=[r for r in area.regions if r.type == "WINDOW"][0]):
                if state["n"] == 2:
                    bpy.ops.view3d.view_all(center=False)
    if state["n"] == 2:
        print("READY", flush=True)
    if state["n"] < 12:
        return 0.5
    bpy.ops.screen.screenshot(filepath=out)
    bpy.ops.wm.quit_blender()
    return None
bpy.app.timers.register(step, first_interval=1.0)
