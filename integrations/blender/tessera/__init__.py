# Tessera for Blender: a sidebar panel in the 3D viewport that sends a prompt to a running
# `tessera serve` and shows the shape forming in the viewport as its tokens arrive (the previews the
# server streams), then the final mesh with the prompt and settings as custom properties; variations
# side by side; and "Paint selected": the selected mesh object painted by the server's image model
# (views around it baked into a texture), brought back as a textured copy in the same place. Only Blender's
# own Python (urllib, json, threading); no pip.
#
# Install: Edit > Preferences > Add-ons > Install..., the zip made by scripts/blender-addon-zip.sh.
# The server: `tessera serve` on the same machine (or --listen ADDR with its token, set in the
# add-on's preferences). The protocol is docs/serve.md and docs/serve-openapi.json.

bl_info = {
    "name": "Tessera",
    "author": "Tessera",
    "version": (0, 1, 0),
    "blender": (3, 4, 0),
    "location": "View3D > Sidebar > Tessera",
    "description": "Text to 3D shapes from a running `tessera serve`, shown as they form; "
                   "paint the selected mesh",
    "category": "Add Mesh",
}

import base64
import http.client
import json
import os
import queue
import shutil
import struct
import tempfile
import threading
import urllib.error
import urllib.request

import bpy

DEFAULT_URL = "http://127.0.0.1:8590"
START_HINT = "start it with: tessera serve"


class TesseraError(Exception):
    """A message for the artist: what went wrong and what to do."""


def _request(url, token, path, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method="POST" if data else "GET")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read().decode("utf-8")).get("error", str(e))
        except ValueError:
            message = str(e)
        if e.code == 401:
            raise TesseraError("The server wants a token: set the one in its serve-token file in "
                               "the Tessera add-on's preferences (" + message + ")")
        raise TesseraError("The server refused the job: " + message)
    except (urllib.error.URLError, OSError) as e:
        raise TesseraError("No Tessera server at " + url + " (" + str(getattr(e, "reason", e)) +
                           "); " + START_HINT)


def submit(url, token, prompt, seed=None, variations=1, resolution=0, preset=""):
    body = {"prompt": prompt, "variations": int(variations)}
    if preset:
        body["preset"] = preset  # the files the server writes follow it (the viewport shows metres)
    if seed is not None:
        body["seed"] = int(seed)
    if resolution:
        body["resolution"] = int(resolution)
    with _request(url, token, "/v1/jobs", body) as r:
        return json.loads(r.read().decode("utf-8"))


def cancel(url, token, job_id):
    with _request(url, token, "/v1/jobs/%d/cancel" % job_id, {}) as r:
        return json.loads(r.read().decode("utf-8"))


def stream(url, token, job_id):
    """The job's events (dicts), from its start to its end."""
    with _request(url, token, "/v1/jobs/%d/events" % job_id, timeout=600) as r:
        for raw in r:
            line = raw.decode("utf-8").strip()
            if line.startswith("data: "):
                yield json.loads(line[6:])


def decode_mesh(text):
    """'TSM1', vertex and triangle counts, float32 xyz, uint32 indices -> (verts, faces), Z up."""
    data = base64.b64decode(text)
    if data[:4] != b"TSM1":
        raise TesseraError("The server sent a mesh this add-on cannot read")
    nv, nt = struct.unpack_from("<II", data, 4)
    xyz = struct.unpack_from("<%df" % (3 * nv), data, 12)
    idx = struct.unpack_from("<%dI" % (3 * nt), data, 12 + 12 * nv)
    # Tessera is Y up, Blender Z up: (x, y, z) -> (x, -z, y).
    verts = [(xyz[i], -xyz[i + 2], xyz[i + 1]) for i in range(0, 3 * nv, 3)]
    faces = [idx[i:i + 3] for i in range(0, 3 * nt, 3)]
    return verts, faces


class Job:
    """One job's objects in the scene: a mesh object per candidate, updated as events arrive."""

    SPACING = 1.2  # metres between the variations, beyond their height

    def __init__(self, prompt, job_id, variations, height):
        self.prompt = prompt
        self.job_id = job_id
        self.variations = variations
        self.height = height
        self.objects = {}
        self.state = "queued"
        self.error = ""

    def _object(self, candidate):
        obj = self.objects.get(candidate)
        if obj is None:
            name = "Tessera %s" % self.prompt[:40]
            if self.variations > 1:
                name += " %d" % (candidate + 1)
            mesh = bpy.data.meshes.new(name)
            obj = bpy.data.objects.new(name, mesh)
            bpy.context.scene.collection.objects.link(obj)
            obj.location.x = candidate * (self.height + self.SPACING)
            self.objects[candidate] = obj
        return obj

    def _set_mesh(self, candidate, text):
        verts, faces = decode_mesh(text)
        obj = self._object(candidate)
        old = obj.data
        mesh = bpy.data.meshes.new(old.name)
        mesh.from_pydata(verts, [], faces)
        mesh.update()
        obj.data = mesh
        if old.users == 0:
            bpy.data.meshes.remove(old)
        # Scaled so that the shape is `height` metres tall.
        zs = [v[2] for v in verts]
        extent = (max(zs) - min(zs)) if zs else 0.0
        if extent > 0:
            s = self.height / extent
            obj.scale = (s, s, s)

    def apply(self, event):
        """One event of the stream, on Blender's main thread."""
        kind = event.get("type")
        candidate = int(event.get("candidate", 0))
        if kind in ("queued", "started"):
            self.state = kind
        elif kind == "preview" and event.get("mesh"):
            self._set_mesh(candidate, event["mesh"])
        elif kind == "mesh":
            self._set_mesh(candidate, event["mesh"])
            obj = self.objects[candidate]
            obj["tessera_prompt"] = self.prompt
            obj["tessera_seed"] = int(event.get("seed", 0))
            obj["tessera_job"] = int(self.job_id)
            obj["tessera_candidate"] = candidate
            obj["tessera_triangles"] = int(event.get("triangles", 0))
        elif kind in ("done", "failed", "cancelled"):
            self.state = kind
            self.error = event.get("error", "")
        return self.state in ("done", "failed", "cancelled")


def generate_blocking(url, token, prompt, seed=None, variations=1, resolution=0, height=1.0,
                      preset=""):
    """Submits and follows a job on this thread (scripts, headless Blender); returns the Job."""
    accepted = submit(url, token, prompt, seed, variations, resolution, preset)
    job = Job(prompt, accepted["id"], variations, height)
    for event in stream(url, token, job.job_id):
        if job.apply(event):
            break
    return job


# ---- painting ---------------------------------------------------------------------------------

def mesh_as_obj(obj):
    """The object's evaluated mesh in world space as OBJ text, Y up (Tessera's frame), triangles,
    with its active UV map's coordinates when it has one (the painter keeps a mesh's own uvs)."""
    depsgraph = bpy.context.evaluated_depsgraph_get()
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    try:
        mesh.calc_loop_triangles()
        m = obj.matrix_world
        lines = []
        for v in mesh.vertices:
            x, y, z = m @ v.co
            lines.append("v %.6f %.6f %.6f" % (x, z, -y))  # Blender Z up -> Y up
        uv = mesh.uv_layers.active
        if uv is not None:
            for d in uv.data:
                lines.append("vt %.6f %.6f" % (d.uv[0], d.uv[1]))
        for t in mesh.loop_triangles:
            if uv is not None:
                lines.append("f " + " ".join("%d/%d" % (v + 1, l + 1)
                                             for v, l in zip(t.vertices, t.loops)))
            else:
                lines.append("f " + " ".join(str(v + 1) for v in t.vertices))
        if not mesh.loop_triangles:
            raise TesseraError("The selected object has no faces to paint")
        return "\n".join(lines) + "\n"
    finally:
        evaluated.to_mesh_clear()


def submit_paint(url, token, obj, prompt, seed=None, steps=0, views=4, view_size=0, fast=False):
    body = {"kind": "paint", "prompt": prompt, "format": "glb", "mesh_format": "obj",
            "mesh": base64.b64encode(mesh_as_obj(obj).encode("utf-8")).decode("ascii"),
            "views": {"ring": int(views)}}
    if seed is not None:
        body["seed"] = int(seed)
    if steps:
        body["steps"] = int(steps)
    if view_size:
        body["view_size"] = int(view_size)
    if fast:
        body["fast"] = True
    with _request(url, token, "/v1/jobs", body) as r:
        return json.loads(r.read().decode("utf-8"))


def download_result(url, token, result_path):
    """The bytes of a job's result (up to two minutes for a large painted mesh: called off
    Blender's main thread by the panel, so the interface stays live)."""
    try:
        with _request(url, token, result_path, timeout=120) as r:
            return r.read()
    except (OSError, http.client.HTTPException) as e:  # a timeout or a cut-short reply
        raise TesseraError("The painted mesh did not download from " + url + " (" + str(e) +
                           "): paint again")


def import_painted(data, name):
    """Imports the painted GLB's bytes; returns the new object (Blender's glTF importer turns Y up
    back into Z up, so it lands where the original is)."""
    import numpy
    if not hasattr(numpy, "bool"):  # Blender 3.4's glTF importer with numpy >= 1.24
        numpy.bool = bool
    folder = tempfile.mkdtemp(prefix="tessera-paint-")
    try:
        path = os.path.join(folder, "painted.glb")
        with open(path, "wb") as f:
            f.write(data)
        before = set(bpy.data.objects)
        try:
            bpy.ops.import_scene.gltf(filepath=path, import_shading="SMOOTH")
        except RuntimeError as e:
            raise TesseraError("The painted mesh did not import: " + str(e))
        new = [o for o in bpy.data.objects if o not in before and o.type == "MESH"]
        if not new:
            raise TesseraError("The painted mesh did not import")
        painted = new[0]
        painted.name = name
        # The image lives in the .blend (packed), not in the temporary file.
        for slot in painted.material_slots:
            if slot.material and slot.material.use_nodes:
                for node in slot.material.node_tree.nodes:
                    if node.type == "TEX_IMAGE" and node.image and node.image.packed_file is None:
                        node.image.pack()
        return painted
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class PaintJob:
    """A paint job's progress (views) and, at its end, the painted copy in the scene."""

    def __init__(self, url, token, source_name, prompt, job_id):
        self.url, self.token = url, token
        self.source_name = source_name
        self.prompt = prompt
        self.job_id = job_id
        self.state = "queued"
        self.error = ""
        self.view = ""
        self.result = ""
        self.painted = None
        self.coverage = 0.0
        self.fetched_in_background = False  # the result came with the event (the panel's thread)

    def apply(self, event):
        kind = event.get("type")
        if kind in ("queued", "started"):
            self.state = kind
        elif kind == "view":
            self.view = "view %d/%d %s" % (event["view"] + 1, event["views"], event["name"])
        elif kind == "painted":
            self.result = event.get("result", "")
            self.coverage = float(event.get("coverage", 0))
            if not self.result:
                self.error = event.get("error", "the painted mesh was not written")
        elif kind in ("done", "failed", "cancelled"):
            self.state = kind
            self.error = event.get("error", self.error)
            if kind == "done" and self.result:
                data = event.get("result_bytes")
                self.fetched_in_background = data is not None
                if data is None:
                    data = download_result(self.url, self.token, self.result)
                self.painted = import_painted(data, "%s painted" % self.source_name)
                self.painted["tessera_paint_prompt"] = self.prompt
                self.painted["tessera_job"] = int(self.job_id)
        return self.state in ("done", "failed", "cancelled")


def paint_blocking(url, token, obj, prompt, seed=None, steps=0, views=4, view_size=0, fast=False):
    """Paints `obj` on this thread (scripts, headless Blender); returns the PaintJob."""
    accepted = submit_paint(url, token, obj, prompt, seed, steps, views, view_size, fast)
    job = PaintJob(url, token, obj.name, prompt, accepted["id"])
    for event in stream(url, token, job.job_id):
        if job.apply(event):
            break
    return job


class TesseraPreferences(bpy.types.AddonPreferences):
    bl_idname = __name__
    url: bpy.props.StringProperty(name="Server", default=DEFAULT_URL)
    token: bpy.props.StringProperty(name="Token", subtype="PASSWORD",
                                    description="The server's serve-token (only beyond loopback)")

    def draw(self, context):
        self.layout.prop(self, "url")
        self.layout.prop(self, "token")


class TesseraSettings(bpy.types.PropertyGroup):
    prompt: bpy.props.StringProperty(name="Prompt", default="a chair")
    random_seed: bpy.props.BoolProperty(name="Random seed", default=True)
    seed: bpy.props.IntProperty(name="Seed", default=0, min=0)
    variations: bpy.props.IntProperty(name="Variations", default=1, min=1, max=8)
    resolution: bpy.props.EnumProperty(
        name="Detail",
        items=[("0", "Model's", "The model's own resolution"), ("65", "65", ""),
               ("129", "129", ""), ("257", "257", "")],
        default="0")
    height: bpy.props.FloatProperty(name="Height", default=1.0, min=0.01, unit="LENGTH")
    preset: bpy.props.EnumProperty(
        name="Preset",
        description="The platform the server's files are made for (its result files)",
        items=[("none", "None", "Tessera's defaults")] + [
            (p, p.capitalize(), "") for p in ("roblox", "unity", "unreal", "blender", "godot", "print")],
        default="none")
    paint_prompt: bpy.props.StringProperty(name="Paint", default="a wooden chair",
                                           description="What the selected object looks like")
    paint_fast: bpy.props.BoolProperty(
        name="Fast", default=False,
        description="LCM in 4 steps per view (the server needs the LCM-LoRA in its LoRA folder)")
    paint_views: bpy.props.IntProperty(name="Views", default=4, min=1, max=16,
                                       description="Views around the object (plus top and bottom)")
    status: bpy.props.StringProperty(name="Status", default="")
    job_id: bpy.props.IntProperty(default=0)


def _prefs(context):
    addon = context.preferences.addons.get(__name__)
    if addon is None:
        return DEFAULT_URL, ""
    return addon.preferences.url, addon.preferences.token


class _Running:
    job = None
    events = None
    thread = None


def _poll_events():
    """A timer on the main thread: applies what the stream thread received."""
    settings = bpy.context.scene.tessera
    job = _Running.job
    if job is None:
        return None
    try:
        while True:
            event = _Running.events.get_nowait()
            if isinstance(event, Exception):
                settings.status = str(event)
                _Running.job = None
                return None
            try:
                ended = job.apply(event)
            except Exception as e:  # noqa: BLE001  (any failure ends the job, never the timer)
                settings.status = str(e)
                _Running.job = None
                return None
            if ended:
                if isinstance(job, PaintJob):
                    settings.status = ("Painted: %s (%.0f %% seen)" % (job.painted.name,
                                                                      100 * job.coverage)
                                       if job.painted else
                                       ("%s %s" % (job.state.capitalize(), job.error)).strip())
                else:
                    settings.status = ("Done: %d object(s)" % len(job.objects)) \
                        if job.state == "done" \
                        else ("%s %s" % (job.state.capitalize(), job.error)).strip()
                _Running.job = None
                return None
            if isinstance(job, PaintJob):
                settings.status = "Painting: %s" % (job.view or job.state)
            else:
                settings.status = "Forming: %s" % job.state
    except queue.Empty:
        pass
    return 0.05


def _busy(operator):
    """True (and said) while a job of this add-on runs: one at a time."""
    if _Running.job is None:
        return False
    operator.report({"WARNING"}, "A Tessera job is running: cancel it or wait")
    return True


def _follow(url, token, job):
    events = queue.Queue()

    def follow():
        result = ""
        try:
            for event in stream(url, token, job.job_id):
                kind = event.get("type")
                if kind == "painted":
                    result = event.get("result", "")
                elif kind == "done" and result and isinstance(job, PaintJob):
                    # The painted mesh is fetched here, not in the main thread's timer.
                    event = dict(event, result_bytes=download_result(url, token, result))
                events.put(event)
        except Exception as e:  # noqa: BLE001  (any failure ends the job: the timer says it)
            events.put(e)

    _Running.job, _Running.events = job, events
    _Running.thread = threading.Thread(target=follow, daemon=True)
    _Running.thread.start()
    bpy.app.timers.register(_poll_events)


class TESSERA_OT_generate(bpy.types.Operator):
    bl_idname = "tessera.generate"
    bl_label = "Generate"
    bl_description = "Send the prompt to the Tessera server and show the shape forming"

    def execute(self, context):
        s = context.scene.tessera
        if _busy(self):
            return {"CANCELLED"}
        url, token = _prefs(context)
        seed = None if s.random_seed and s.variations == 1 else s.seed
        try:
            accepted = submit(url, token, s.prompt, seed, s.variations, int(s.resolution),
                              "" if s.preset == "none" else s.preset)
        except TesseraError as e:
            s.status = str(e)
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        job = Job(s.prompt, accepted["id"], s.variations, s.height)
        s.job_id = job.job_id
        s.status = "Queued"
        _follow(url, token, job)
        return {"FINISHED"}


class TESSERA_OT_paint(bpy.types.Operator):
    bl_idname = "tessera.paint"
    bl_label = "Paint selected"
    bl_description = ("Paint the selected mesh with the Tessera server's image model; a textured "
                      "copy appears in its place (the original stays, hide it to compare)")

    @classmethod
    def poll(cls, context):
        return context.active_object is not None and context.active_object.type == "MESH"

    def execute(self, context):
        s = context.scene.tessera
        if _busy(self):
            return {"CANCELLED"}
        url, token = _prefs(context)
        obj = context.active_object
        try:
            accepted = submit_paint(url, token, obj, s.paint_prompt, views=s.paint_views,
                                    fast=s.paint_fast)
        except TesseraError as e:
            s.status = str(e)
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        job = PaintJob(url, token, obj.name, s.paint_prompt, accepted["id"])
        s.job_id = job.job_id
        s.status = "Queued"
        _follow(url, token, job)
        return {"FINISHED"}


class TESSERA_OT_cancel(bpy.types.Operator):
    bl_idname = "tessera.cancel"
    bl_label = "Cancel"
    bl_description = "Stop the running job"

    def execute(self, context):
        s = context.scene.tessera
        url, token = _prefs(context)
        if s.job_id:
            try:
                cancel(url, token, s.job_id)
            except TesseraError as e:
                s.status = str(e)
        return {"FINISHED"}


class TESSERA_PT_panel(bpy.types.Panel):
    bl_label = "Tessera"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Tessera"

    def draw(self, context):
        s = context.scene.tessera
        col = self.layout.column()
        col.prop(s, "prompt", text="")
        row = col.row()
        row.prop(s, "random_seed")
        sub = row.row()
        sub.enabled = not s.random_seed
        sub.prop(s, "seed")
        col.prop(s, "variations")
        col.prop(s, "resolution")
        col.prop(s, "height")
        col.prop(s, "preset")
        row = col.row()
        row.operator("tessera.generate", icon="MESH_MONKEY")
        row.operator("tessera.cancel", icon="CANCEL")
        col.separator()
        col.prop(s, "paint_prompt")
        row = col.row()
        row.prop(s, "paint_views")
        row.prop(s, "paint_fast")
        col.operator("tessera.paint", icon="BRUSH_DATA")
        if s.status:
            col.label(text=s.status)


_CLASSES = (TesseraPreferences, TesseraSettings, TESSERA_OT_generate, TESSERA_OT_paint,
            TESSERA_OT_cancel, TESSERA_PT_panel)


def register():
    for c in _CLASSES:
        bpy.utils.register_class(c)
    bpy.types.Scene.tessera = bpy.props.PointerProperty(type=TesseraSettings)


def unregister():
    del bpy.types.Scene.tessera
    for c in reversed(_CLASSES):
        bpy.utils.unregister_class(c)
