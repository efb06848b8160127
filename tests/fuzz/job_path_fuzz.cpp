// libFuzzer target for the whole path a prompt takes, with the embedded tessera-tiny model: the
// bytes of a prompt and the main settings -> runtime::Session (the door every front end passes,
// text rule included) -> shape tokens -> mesh -> runtime::export_asset into every format (OBJ, GLB,
// FBX, STL, 3MF) in a temporary folder -> the metadata read back. Built with ASan/UBSan when
// TESSERA_FUZZ=ON.
//
// Input: 8 bytes of settings, then the prompt's bytes (anything: invalid UTF-8, NUL, controls,
// emoji, kilobytes).
//   [0] bit 0 sample, bit 1 two variations, bit 2 write no metadata
//   [1] seed   [2] temperature   [3] top-k   [4] top-p   [5] guidance
//   [6] resolution (9, 17 or 33: cheap extractions)   [7] tokens (1..64; 0: all)
// What must hold (else __builtin_trap): no exception, no sanitizer report; the job ends with a
// mesh per candidate, or with an Error naming the prompt when the text rule refuses it (too long);
// every export succeeds; a file's metadata carries exactly the prompt the rule made of the input
// (valid UTF-8, no control characters, the rule idempotent on it).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "engine/mesh/metadata.h"
#include "engine/runtime/export_asset.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

namespace {

using namespace tessera;

runtime::Session& session() {
  static std::unique_ptr<runtime::Session> s = [] {
    auto opened = runtime::Session::open(runtime::ShapeModelOptions{});
    if (!opened.ok()) {
      std::fprintf(stderr, "job_path_fuzz: %s\n", opened.status().message().c_str());
      std::abort();
    }
    return std::move(*opened);
  }();
  return *s;
}

const std::string& work_dir() {
  static const std::string dir = [] {
    char path[] = "/tmp/tessera-job-fuzz-XXXXXX";
    if (::mkdtemp(path) == nullptr) std::abort();
    return std::string(path);
  }();
  return dir;
}

// A control character or invalid UTF-8 left in `text` breaks the rule's promise.
bool rule_holds(const std::string& text) {
  if (!runtime::is_valid_utf8(text)) return false;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7F) return false;
  }
  auto again = runtime::check_user_text("prompt", text, std::string::npos);
  return again.ok() && !again->changed() && again->text == text;
}

void run(const uint8_t* data, size_t size) {
  if (size < 8) return;
  const std::string prompt(reinterpret_cast<const char*>(data) + 8, size - 8);
  runtime::JobOptions job;
  job.prompt = prompt;
  SamplingSettings& sampler = job.generation.sampling;
  sampler.sample = (data[0] & 1) != 0;
  job.variations = sampler.sample && (data[0] & 2) != 0 ? 2 : 1;
  const bool metadata = (data[0] & 4) == 0;
  sampler.seed = data[1];
  sampler.temperature = 0.25f + static_cast<float>(data[2]) / 64.0f;
  sampler.top_k = data[3] % 8 == 0 ? 0 : data[3];
  sampler.top_p = 0.05f + 0.95f * static_cast<float>(data[4]) / 255.0f;
  job.generation.sampling.guidance = static_cast<float>(data[5]) / 32.0f;
  static constexpr int kResolutions[] = {9, 17, 33};
  job.mesh.resolution = kResolutions[data[6] % 3];
  job.generation.num_tokens = data[7] % 65;

  // What the door will make of the text: the same rule the Session applies.
  runtime::JobOptions expected = job;
  const Expected<runtime::TextNotes> notes = runtime::accept_job_text(&expected);
  if (notes.ok() && !rule_holds(expected.prompt)) __builtin_trap();

  runtime::Session& s = session();
  int meshes = 0;
  bool failed = false;
  const runtime::Event end = s.wait_for(s.submit(job), [&](const runtime::Event& event) {
    const auto* f = std::get_if<runtime::FinalMeshEvent>(&event.payload);
    if (f == nullptr) return;
    ++meshes;
    runtime::AssetExport request;
    if (metadata) {
      request.settings =
          runtime::shape_settings_json(expected, f->seed, f->resolution, "tessera-tiny", "0");
    }
    for (const char* ext : {".obj", ".glb", ".fbx", ".stl", ".3mf"}) {
      const std::string path = work_dir() + "/job" + std::to_string(f->candidate) + ext;
      auto written = runtime::export_asset(*f->mesh, path, request);
      if (!written.ok()) {
        std::fprintf(stderr, "export failed: %s\n", written.status().message().c_str());
        failed = true;
        continue;
      }
      if (!metadata || std::string_view(ext) == ".stl") continue;
      auto read = mesh::read_metadata(path);
      if (!read.ok() || !read->contains("prompt") || !(*read)["prompt"].is_string() ||
          (*read)["prompt"].get<std::string>() != expected.prompt) {
        std::fprintf(stderr, "%s: the metadata's prompt is not the rule's\n", path.c_str());
        failed = true;
      }
    }
  });
  if (failed) __builtin_trap();
  if (!notes.ok()) {  // refused: an Error naming the field, and nothing made
    const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload);
    if (e == nullptr || meshes != 0 || e->status.message().find("prompt") == std::string::npos) {
      __builtin_trap();
    }
    return;
  }
  if (!std::holds_alternative<runtime::DoneEvent>(end.payload) || meshes != job.variations) {
    if (const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload)) {
      std::fprintf(stderr, "job failed: %s\n", e->status.message().c_str());
    }
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run(data, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exception escaped: %s\n", e.what());
    __builtin_trap();
  }
  return 0;
}
