// tessera-bench lora: merging a LoRA into SD 1.5's UNet at load, timed. Writes (once, into --dir)
// an SD 1.5 UNet with random F16 weights (860 M parameters, CompVis names) and a LoRA of the
// LCM-LoRA's shape (rank 64, alpha 64, on every module its training script targets: the attention
// projections, proj_in / proj_out, the GEGLU and output feed-forward, the ResBlocks' two 3x3 convs,
// their 1x1 shortcuts and timestep projections, the down- and upsampling convs; kohya keys with
// LDM paths), then times, --repeat times, what a load with the LoRA adds to a load without it:
// reading its modules, the deltas (one GEMM per module) and the f32 weights materialized with the
// change added, against the same materialization without a LoRA.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common.h"
#include "bench/subcommands.h"
#include "core/safetensors.h"
#include "engine/diffusion/lora.h"
#include "engine/diffusion/sd_config.h"
#include "engine/weights/weight_store.h"

namespace tessera::bench {
namespace {

struct LoraBenchOptions {
  std::string dir = "out/bench-lora";
  int rank = 64;
  int repeat = 3;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool lora_target(const std::string& name) {
  static const char* kTails[] = {".attn1.to_q.weight",
                                 ".attn1.to_k.weight",
                                 ".attn1.to_v.weight",
                                 ".attn1.to_out.0.weight",
                                 ".attn2.to_q.weight",
                                 ".attn2.to_k.weight",
                                 ".attn2.to_v.weight",
                                 ".attn2.to_out.0.weight",
                                 ".proj_in.weight",
                                 ".proj_out.weight",
                                 ".ff.net.0.proj.weight",
                                 ".ff.net.2.weight",
                                 ".in_layers.2.weight",
                                 ".out_layers.3.weight",
                                 ".skip_connection.weight",
                                 ".emb_layers.1.weight",
                                 ".op.weight",
                                 ".conv.weight"};
  for (const char* t : kTails) {
    const std::string tail(t);
    if (name.size() > tail.size() &&
        name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
      return true;
    }
  }
  return false;
}

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

Status write_files(const LoraBenchOptions& o, const diffusion::TensorShapes& shapes,
                   const std::string& unet_path, const std::string& lora_path, int64_t* lora_params,
                   int* modules) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  namespace fs = std::filesystem;
  if (!fs::exists(unet_path)) {
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> tensors;
    data.reserve(shapes.size());
    for (const auto& [name, shape] : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      data.emplace_back(static_cast<size_t>(n));
      for (float& v : data.back()) v = normal(rng);
      tensors.push_back(TensorToWrite::from_f32(name, DType::kF16, shape, data.back().data()));
    }
    TESSERA_RETURN_IF_ERROR(write_safetensors(unet_path, tensors));
  }
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  const float alpha = static_cast<float>(o.rank);
  *lora_params = 0;
  *modules = 0;
  for (const auto& [name, shape] : shapes) {
    if (!lora_target(name) || shape.size() < 2) continue;
    const std::string path = name.substr(std::string(diffusion::kUNetPrefix).size());
    const std::string stem =
        "lora_unet_" + underscored(path.substr(0, path.size() - std::string(".weight").size()));
    int64_t in = 1;
    for (size_t d = 1; d < shape.size(); ++d) in *= shape[d];
    std::vector<int64_t> down_shape = {o.rank, shape[1]}, up_shape = {shape[0], o.rank};
    if (shape.size() == 4) {
      down_shape = {o.rank, shape[1], shape[2], shape[3]};
      up_shape = {shape[0], o.rank, 1, 1};
    }
    data.emplace_back(static_cast<size_t>(o.rank * in));
    for (float& v : data.back()) v = normal(rng);
    tensors.push_back(TensorToWrite::from_f32(stem + ".lora_down.weight", DType::kF16, down_shape,
                                              data.back().data()));
    data.emplace_back(static_cast<size_t>(shape[0] * o.rank));
    for (float& v : data.back()) v = normal(rng);
    tensors.push_back(TensorToWrite::from_f32(stem + ".lora_up.weight", DType::kF16, up_shape,
                                              data.back().data()));
    data.emplace_back(1, alpha);
    tensors.push_back(
        TensorToWrite::from_f32(stem + ".alpha", DType::kF32, {}, data.back().data()));
    *lora_params += o.rank * (in + shape[0]);
    ++*modules;
  }
  return write_safetensors(lora_path, tensors);
}

Status run_bench_lora(const LoraBenchOptions& o) {
  const Machine machine = describe_machine();
  std::printf("%s\n", machine_line(machine).c_str());
  warn_if_busy(machine);
  std::filesystem::create_directories(o.dir);
  const diffusion::UNetConfig cfg = diffusion::sd15_unet_config();
  const diffusion::TensorShapes shapes = diffusion::unet_tensor_shapes(cfg);
  const std::string unet_path = o.dir + "/sd15-unet-f16.safetensors";
  const std::string lora_path = o.dir + "/lcm-shaped-lora.safetensors";
  int64_t lora_params = 0;
  int modules = 0;
  const auto t_write = std::chrono::steady_clock::now();
  TESSERA_RETURN_IF_ERROR(write_files(o, shapes, unet_path, lora_path, &lora_params, &modules));
  std::printf("files: %s, %s (%d modules, %.2f M LoRA parameters, rank %d; written in %.1f s)\n",
              unet_path.c_str(), lora_path.c_str(), modules, lora_params / 1e6, o.rank,
              ms_since(t_write) / 1e3);
  std::vector<double> plain_ms, read_ms, delta_ms, merged_ms;
  for (int r = 0; r < o.repeat; ++r) {
    for (bool with_lora : {false, true}) {
      TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(unet_path));
      WeightStore store(std::move(file), WeightFormat::kF32);
      auto t0 = std::chrono::steady_clock::now();
      if (with_lora) {
        TESSERA_ASSIGN_OR_RETURN(diffusion::LoraFileModules m,
                                 diffusion::read_lora_modules(lora_path));
        read_ms.push_back(ms_since(t0));
        t0 = std::chrono::steady_clock::now();
        diffusion::LoraMerged merged;
        TESSERA_RETURN_IF_ERROR(
            diffusion::merge_lora({lora_path, 1.0f}, m, cfg, &store, nullptr, "", &merged));
        if (merged.unet_modules != modules) {
          return internal_error("merged " + std::to_string(merged.unet_modules) + " of " +
                                std::to_string(modules) + " modules");
        }
        delta_ms.push_back(ms_since(t0));
        t0 = std::chrono::steady_clock::now();
      }
      // The changed weights as the UNet asks for them (f32), with and without the change.
      for (const auto& [name, shape] : shapes) {
        if (!lora_target(name)) continue;
        TESSERA_ASSIGN_OR_RETURN(const float* w, store.f32(name, shape));
        (void)w;
      }
      (with_lora ? merged_ms : plain_ms).push_back(ms_since(t0));
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double read = median(read_ms), delta = median(delta_ms), merged = median(merged_ms),
               plain = median(plain_ms);
  std::printf("| phase | ms (median of %d) |\n|---|---|\n", o.repeat);
  std::printf("| read the LoRA's modules | %.1f |\n", read);
  std::printf("| deltas: up x down per module (GEMM) | %.1f |\n", delta);
  std::printf("| changed weights to f32, with the change | %.1f |\n", merged);
  std::printf("| the same weights to f32, no LoRA | %.1f |\n", plain);
  std::printf("LoRA merge adds %.2f s to the load (read + deltas + (with - without))\n",
              (read + delta + merged - plain) / 1e3);
  return Status();
}

}  // namespace

void register_lora_bench(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<LoraBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "lora", "Merging an LCM-LoRA-sized LoRA into an SD 1.5 UNet (random weights) at load");
  cmd->add_option("--dir", o->dir,
                  "Where the random UNet (1.7 GB) and LoRA are written once (default "
                  "out/bench-lora)");
  cmd->add_option("--rank", o->rank, "LoRA rank (default 64, the LCM-LoRA's)")
      ->check(CLI::Range(1, 512));
  cmd->add_option("--repeat", o->repeat, "Timed loads with and without (default 3)")
      ->check(CLI::Range(1, 20));
  cmd->callback([o, exit_code] {
    const Status st = run_bench_lora(*o);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera-bench lora: %s\n", st.message().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
