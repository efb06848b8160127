// libFuzzer target for a job as JSON (engine/runtime/job_request.h): what `tessera serve` reads
// from every POST /v1/jobs body and `tessera batch` from every JSON line. Input: any bytes. What
// must hold (else __builtin_trap): no exception, no sanitizer report; a request that parses has
// every field in its range (variations 1..kMaxVariations, a resolution of 2^k + 1 or 0, a name that
// is a plain file name), its job passes the same checks, and the text rule either accepts the
// prompt or refuses it with a message. The same bytes as an image job and as a paint job
// (engine/runtime/image_request.h): refused with a message, or accepted within the job rules (a
// paint job's mesh valid, with triangles). The seeds' paint jobs carry tiny meshes in base64.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/mesh/mesh.h"
#include "engine/runtime/image_inputs.h"
#include "engine/runtime/image_request.h"
#include "engine/runtime/job_request.h"
#include "engine/runtime/user_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) return 0;
    auto image = runtime::parse_image_request(j);
    if (!image.ok() && image.status().message().empty()) __builtin_trap();
    if (image.ok()) {
      if (!runtime::check_image_job(*image).ok() || image->steps < 1) __builtin_trap();
      auto accepted_image = runtime::accept_job_text(&*image);
      if (!accepted_image.ok() && accepted_image.status().message().empty()) __builtin_trap();
    }
    auto paint = runtime::parse_paint_request(j, {"format"});
    if (!paint.ok() && paint.status().message().empty()) __builtin_trap();
    if (paint.ok()) {
      if (!runtime::check_paint_job(*paint).ok() || paint->mesh == nullptr ||
          paint->mesh->triangles.empty() || !tessera::mesh::validate(*paint->mesh).ok()) {
        __builtin_trap();
      }
    }
    auto request = runtime::parse_job_request(j, {"format"});
    if (!request.ok()) {
      if (request.status().message().empty()) __builtin_trap();
      return 0;
    }
    const runtime::JobRequest& r = *request;
    if (r.variations < 1 || r.variations > runtime::kMaxVariations) __builtin_trap();
    if (!check_sampling(r.sampling).ok()) __builtin_trap();  // accepted: within every range
    if (r.resolution != 0 && !runtime::resolution_base(r.resolution).ok()) __builtin_trap();
    if (!r.name.empty() && (r.name.find('/') != std::string::npos || r.name[0] == '.'))
      __builtin_trap();
    runtime::JobOptions job = r.job();
    if (job.variations > 1 && !job.generation.sampling.sample) __builtin_trap();
    auto accepted = runtime::accept_job_text(&job);
    if (!accepted.ok() && accepted.status().message().empty()) __builtin_trap();
  } catch (const std::exception&) {
    __builtin_trap();
  }
  return 0;
}
