// tessera quantize [--model DIR] -o OUT: a copy of a shape model directory (the embedded one when
// --model is not given) with the shape GPT's linear layers stored in int8 (symmetric, an f32 scale
// per group of 128/64/32 weights along the input; engine/runtime/quantize.h), which every command
// then loads directly (--model OUT): half the bytes of a bf16 GPT, no quantization at each start.
// OUT must not exist; it appears only once complete (built under a temporary name, then renamed).
// Exit status 0 when written, 1 on an error (the reason on stderr, naming the file or tensor;
// nothing is left at OUT), 2 for bad usage.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "engine/runtime/capabilities.h"
#include "engine/runtime/quantize.h"

namespace tessera::cli {
namespace {

struct QuantizeCliOptions {
  std::string model;
  std::string output;
};

int run_quantize(const QuantizeCliOptions& o) {
  const std::string src = o.model.empty() ? runtime::default_shape_model_dir() : o.model;
  const auto start = std::chrono::steady_clock::now();
  runtime::QuantizeReport report;
  if (Status st = runtime::quantize_model_dir(src, o.output, &report); !st.ok()) {
    std::fprintf(stderr, "tessera quantize: %s\n", st.message().c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (%.1f s)\n", o.output.c_str(), seconds);
  std::printf(
      "  shape_gpt.safetensors: %lld matrices int8 (group %lld, f32 scales), %lld tensors "
      "unchanged\n",
      static_cast<long long>(report.int8_matrices), static_cast<long long>(report.int8_group),
      static_cast<long long>(report.unchanged));
  std::printf("  GPT data: %.1f MB -> %.1f MB (%.2fx)\n", report.gpt_bytes_in / 1e6,
              report.gpt_bytes_out / 1e6,
              report.gpt_bytes_in > 0 ? static_cast<double>(report.gpt_bytes_out) /
                                            static_cast<double>(report.gpt_bytes_in)
                                      : 0.0);
  std::printf("  rounding: at most %.4f of a group's largest weight\n", report.max_group_rel_error);
  std::printf(
      "  CLIP encoder + shape tokenizer: %lld matrices as bf16 (what int8 runs; used in place), "
      "%.1f MB -> %.1f MB\n",
      static_cast<long long>(report.bf16_matrices), report.companion_bytes_in / 1e6,
      report.companion_bytes_out / 1e6);
  std::printf("  %zu other files copied\n", report.copied.size());
  std::printf("use it with: tessera generate --model %s -p \"a cube\" -o cube.glb\n",
              o.output.c_str());
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Write a copy of a shape model with its GPT's linear layers in int8 and the CLIP encoder's "
      "and shape tokenizer's matrices in bf16 (loads directly, used in place: half the memory of "
      "bf16)");
  cmd->add_option("--model", o->model,
                  "Cube 3D-layout model directory (default: the embedded tessera-tiny)");
  cmd->add_option("-o,--output", o->output, "New directory to write (must not exist)")->required();
  cmd->callback([o, exit_code] { *exit_code = run_quantize(*o); });
}

}  // namespace tessera::cli
