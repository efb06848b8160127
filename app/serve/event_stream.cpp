#include "app/serve/event_stream.h"

#include "core/base64.h"

#include <cstdint>
#include <variant>

namespace tessera::serve {

using nlohmann::json;

std::string compact_mesh(const mesh::Mesh& m) {
  std::string bytes = "TSM1";
  auto put32 = [&](uint32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<uint32_t>(m.vertex_count()));
  put32(static_cast<uint32_t>(m.triangle_count()));
  bytes.append(reinterpret_cast<const char*>(m.positions.data()), m.positions.size() * 4);
  bytes.append(reinterpret_cast<const char*>(m.triangles.data()), m.triangles.size() * 4);
  return encode_base64(bytes);
}

std::optional<json> progress_event(const runtime::Event& e) {
  if (const auto* t = std::get_if<runtime::TokenEvent>(&e.payload)) {
    return json{{"type", "token"},
                {"candidate", t->candidate},
                {"index", t->index},
                {"id", t->id},
                {"ms", t->ms}};
  }
  if (const auto* s = std::get_if<runtime::StageEvent>(&e.payload)) {
    return json{{"type", "stage"}, {"name", s->name}, {"ms", s->ms}, {"candidate", s->candidate}};
  }
  if (const auto* p = std::get_if<runtime::PartialMeshEvent>(&e.payload)) {
    return json{{"type", "preview"},
                {"candidate", p->candidate},
                {"tokens", p->tokens},
                {"mesh", compact_mesh(*p->mesh)}};
  }
  return std::nullopt;
}

std::string sse_frames(const std::vector<std::string>& events, size_t* sent) {
  std::string chunk = *sent < events.size() ? "" : ":\n\n";
  for (; *sent < events.size(); ++*sent) chunk += "data: " + events[*sent] + "\n\n";
  return chunk;
}

void drop_preview_meshes(std::vector<std::string>* events) {
  for (std::string& event : *events) {
    if (event.rfind("{\"candidate\"", 0) == 0 &&
        event.find("\"type\":\"preview\"") != std::string::npos) {
      json stub = json::parse(event, nullptr, false);
      if (stub.is_object()) {
        stub.erase("mesh");
        event = stub.dump();
      }
    }
  }
}

}  // namespace tessera::serve
