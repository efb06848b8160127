# Tessera for Blender: a sidebar panel in the 3D viewport that sends a prompt to a running
# `tessera serve` and shows the shape forming in the viewport as its tokens arrive (the previews the
# server streams), then the final mesh with the prompt and settings as custom properties; variations
# side by side. Only Blender's own Python (urllib, json, threading); no pip.
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
    "description": "Text to 3D shapes from a running `tessera serve`, shown as they form",
    "category": "Add Mesh",
}

import base64
import json
import queue
import struct
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
            if job.apply(event):
                settings.status = ("Done: %d object(s)" % len(job.objects)) if job.state == "done" \
                    else ("%s %s" % (job.state.capitalize(), job.error)).strip()
                _Running.job = None
                return None
            settings.status = "Forming: %s" % job.state
    except queue.Empty:
        pass
    return 0.05


class TESSERA_OT_generate(bpy.types.Operator):
    bl_idname = "tessera.generate"
    bl_label = "Generate"
    bl_description = "Send the prompt to the Tessera server and show the shape forming"

    def execute(self, context):
        s = context.scene.tessera
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
        events = queue.Queue()

        def follow():
            try:
                for event in stream(url, token, job.job_id):
                    events.put(event)
            except TesseraError as e:
                events.put(e)

        _Running.job, _Running.events = job, events
        _Running.thread = threading.Thread(target=follow, daemon=True)
        _Running.thread.start()
        bpy.app.timers.register(_poll_events)
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
        if s.status:
            col.label(text=s.status)


_CLASSES = (TesseraPreferences, TesseraSettings, TESSERA_OT_generate, TESSERA_OT_cancel,
            TESSERA_PT_panel)


def register():
    for c in _CLASSES:
        bpy.utils.register_class(c)
    bpy.types.Scene.tessera = bpy.props.PointerProperty(type=TesseraSettings)


def unregister():
    del bpy.types.Scene.tessera
    for c in reversed(_CLASSES):
        bpy.utils.unregister_class(c)
