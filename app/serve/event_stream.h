// The job's event stream as tessera serve sends it (Server-Sent Events, docs/serve.md): each event
// one JSON object on a `data:` line; a mesh travels compact and base64-encoded in its event. A job
// keeps its events from the start, so a late client misses nothing; once the job has ended its
// previews keep their place (streams count events by index) but lose their mesh bytes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/mesh/mesh.h"
#include "engine/runtime/events.h"

namespace tessera::serve {

// A mesh for the stream: "TSM1", uint32 vertex and triangle counts, float32 xyz per vertex,
// uint32 indices per triangle (little-endian), in base64.
std::string compact_mesh(const mesh::Mesh& m);

// A token, stage or preview event of the runtime as its stream JSON; nullopt for the others (the
// final mesh, written to a file first, and the job's end come from the job table).
std::optional<nlohmann::json> progress_event(const runtime::Event& event);

// The SSE text for events[*sent...] (and *sent moved past them); with nothing new, a comment
// line, so that a client that went away is noticed.
std::string sse_frames(const std::vector<std::string>& events, size_t* sent);

// The preview events of an ended job without their mesh bytes.
void drop_preview_meshes(std::vector<std::string>* events);

}  // namespace tessera::serve
