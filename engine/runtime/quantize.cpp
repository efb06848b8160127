#include "engine/runtime/quantize.h"

#include "engine/core/assets.h"
#include "engine/shape/quantize.h"

namespace tessera::runtime {

Status quantize_model_dir(const std::string& src, const std::string& dst, QuantizeReport* report) {
  shape::QuantizeReport r;
  Status st = shape::quantize_model_dir(src, dst, &r, default_clip_vocab_file());
  if (report != nullptr) {
    report->int8_matrices = r.int8_matrices;
    report->unchanged = r.unchanged;
    report->int8_group = r.int8_group;
    report->gpt_bytes_in = r.gpt_bytes_in;
    report->gpt_bytes_out = r.gpt_bytes_out;
    report->max_group_rel_error = r.max_group_rel_error;
    report->copied = std::move(r.copied);
    report->bf16_matrices = r.bf16_matrices;
    report->companion_bytes_in = r.companion_bytes_in;
    report->companion_bytes_out = r.companion_bytes_out;
  }
  return st;
}

}  // namespace tessera::runtime
