// int8 quantization of a shape model on disk (see quantize.h).
#include "engine/runtime/quantize.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "core/assets.h"
#include "core/checkpoint_kind.h"
#include "core/mapped_file.h"
#include "core/dtype.h"
#include "engine/shape/model_dir.h"
#include "engine/shape/shape_decoder.h"
#include "engine/text/clip_text_encoder.h"
#include "kernels/backend.h"
#include "kernels/int8.h"

namespace tessera::runtime {

namespace fs = std::filesystem;
using shape::ModelDir;
using shape::ModelDirOptions;
using shape::open_model_dir;
using shape::ShapeDecoder;

namespace {

// The tensors CubeGpt::load reads through its linear-matrix path and quantizes: 2-D NAME.weight
// tensors other than the token table, with rows a multiple of 32 long.
bool is_int8_matrix(const TensorInfo& t) {
  const std::string suffix = ".weight";
  return t.shape.size() == 2 && t.name.size() > suffix.size() &&
         t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         t.name != "transformer.wte.weight" && kernels::int8_quantizable(t.shape[1]);
}

std::string dtype_list(const SafeTensors& in) {
  std::set<std::string> names;
  for (const TensorInfo& t : in.tensors()) {
    if (t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16)
      names.insert(dtype_name(t.dtype));
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "+") + n;
  return out;
}

struct QuantizedMatrix {
  std::vector<int8_t> q;
  std::vector<float> scales;
};

}  // namespace

Status quantize_gpt_file(const SafeTensors& in, const std::string& out_path,
                         QuantizeReport* report) {
  QuantizeReport local;
  QuantizeReport& r = report != nullptr ? *report : local;
  const CheckpointKindInfo kind = infer_checkpoint_kind(in);
  if (kind.kind != CheckpointKind::kCube3dGpt) {
    return invalid_argument(in.path() + ": is a " + kind.name +
                            " checkpoint; tessera quantize takes a Cube 3D shape GPT");
  }
  for (const TensorInfo& t : in.tensors()) {
    if (t.dtype == DType::kI8) {
      return invalid_argument(in.path() + ": tensor '" + t.name +
                              "' is already I8: the file is quantized");
    }
  }
  // Every output buffer lives until the file is written (write_safetensors streams from them).
  std::vector<QuantizedMatrix> matrices;
  matrices.reserve(in.size());
  std::vector<TensorToWrite> out;
  out.reserve(in.size() * 2);
  std::vector<float> f32;
  r.gpt_bytes_in = in.total_bytes();
  r.gpt_bytes_out = 0;
  for (const TensorInfo& t : in.tensors()) {
    if (!is_int8_matrix(t)) {
      TESSERA_ASSIGN_OR_RETURN(TensorView view, in.view(t.name));
      out.push_back(TensorToWrite::raw(t.name, t.dtype, t.shape, view.data));
      r.gpt_bytes_out += t.nbytes;
      ++r.unchanged;
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t group = kernels::int8_group_for(cols), groups = cols / group;
    const auto n = static_cast<size_t>(rows * cols);
    f32.resize(n);
    TESSERA_RETURN_IF_ERROR(in.load_f32(t.name, f32.data(), n));
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(f32[i])) {
        return corrupt_data(in.path() + ": tensor '" + t.name + "' holds a non-finite value at [" +
                            std::to_string(static_cast<int64_t>(i) / cols) + ", " +
                            std::to_string(static_cast<int64_t>(i) % cols) + "]");
      }
    }
    QuantizedMatrix m;
    m.scales.resize(static_cast<size_t>(rows * groups));
    m.q.resize(n);
    kernels::quantize_int8_rows(f32.data(), rows, cols, group, m.q.data(), m.scales.data());
    // The rounding check: |w - q * s| <= s / 2 = max|w| / 254 per group.
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t g = 0; g < groups; ++g) {
        const float s = m.scales[static_cast<size_t>(row * groups + g)];
        float amax = 0, err = 0;
        for (int64_t k = g * group; k < (g + 1) * group; ++k) {
          const auto i = static_cast<size_t>(row * cols + k);
          amax = std::max(amax, std::fabs(f32[i]));
          err = std::max(err, std::fabs(f32[i] - static_cast<float>(m.q[i]) * s));
        }
        if (amax > 0) r.max_group_rel_error = std::max(r.max_group_rel_error, double(err / amax));
      }
    }
    in.drop_pages(t.name);
    matrices.push_back(std::move(m));
    const QuantizedMatrix& kept = matrices.back();
    out.push_back(TensorToWrite::raw(t.name, DType::kI8, t.shape, kept.q.data()));
    out.push_back(TensorToWrite::raw(t.name + kernels::kInt8ScaleSuffix, DType::kF32,
                                     {rows, groups}, kept.scales.data()));
    r.gpt_bytes_out += n + kept.scales.size() * sizeof(float);
    r.int8_group = std::max(r.int8_group, group);
    ++r.int8_matrices;
  }
  if (r.int8_matrices == 0) {
    return invalid_argument(in.path() +
                            ": no linear matrix to quantize (none has rows a multiple "
                            "of 32 long)");
  }
  // Wider dtypes first keeps every tensor aligned (safetensors.h).
  std::stable_sort(out.begin(), out.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });
  std::map<std::string, std::string> metadata = in.metadata();
  metadata["tessera.weights"] = "int8";
  metadata["tessera.int8_group"] = std::to_string(r.int8_group);
  metadata["tessera.quantized_from"] = dtype_list(in);
  return write_safetensors(out_path, out, metadata);
}

namespace {

// The tensors of the CLIP encoder and of the shape tokenizer that their bf16 models ask for in bf16
// only: both models built from bf16 stores on the CPU (what --weights int8 runs).
struct Bf16Names {
  std::vector<std::string> text_encoder, shape_tokenizer;
};
Expected<Bf16Names> bf16_names(const std::string& src, const std::string& clip_vocab_fallback) {
  ModelDirOptions options;
  options.weights = WeightFormat::kBF16;
  options.clip_vocab_fallback = clip_vocab_fallback;
  TESSERA_ASSIGN_OR_RETURN(ModelDir m, open_model_dir(src, options));
  std::unique_ptr<kernels::Backend> backend = kernels::make_cpu_backend();
  Bf16Names names;
  {
    auto decoder = ShapeDecoder::load(m.shape_tokenizer, *backend);
    if (!decoder.ok()) return decoder.status().with_context(m.paths.shape_tokenizer);
    names.shape_tokenizer = m.shape_tokenizer.bf16_only_tensors();
  }
  text::ClipTextEncoderOptions clip_options;
  clip_options.n_heads = m.text_heads;
  auto encoder = text::ClipTextEncoder::create(std::move(m.text_encoder), *backend, clip_options);
  if (!encoder.ok()) return encoder.status().with_context(m.paths.text_encoder);
  names.text_encoder = encoder->weights().bf16_only_tensors();
  return names;
}

// `in` written to out_path with the F32/F16 tensors among `names` stored as BF16
// (convert_f32_to_bf16, as WeightStore converts them), the others as they are. Counts into the
// report.
Status write_bf16_matrices(const SafeTensors& in, const std::vector<std::string>& names,
                           const std::string& out_path, QuantizeReport* r) {
  const std::set<std::string> convert(names.begin(), names.end());
  std::vector<std::vector<uint16_t>> owned;
  owned.reserve(in.size());
  std::vector<TensorToWrite> out;
  out.reserve(in.size());
  std::vector<float> f32;
  r->companion_bytes_in += in.total_bytes();
  for (const TensorInfo& t : in.tensors()) {
    const bool to_bf16 =
        convert.count(t.name) != 0 && (t.dtype == DType::kF32 || t.dtype == DType::kF16);
    if (!to_bf16) {
      TESSERA_ASSIGN_OR_RETURN(TensorView view, in.view(t.name));
      out.push_back(TensorToWrite::raw(t.name, t.dtype, t.shape, view.data));
      r->companion_bytes_out += t.nbytes;
      continue;
    }
    const auto n = static_cast<size_t>(t.numel());
    f32.resize(n);
    TESSERA_RETURN_IF_ERROR(in.load_f32(t.name, f32.data(), n));
    in.drop_pages(t.name);
    owned.emplace_back(n);
    convert_f32_to_bf16(f32.data(), owned.back().data(), n);
    out.push_back(TensorToWrite::raw(t.name, DType::kBF16, t.shape, owned.back().data()));
    r->companion_bytes_out += n * sizeof(uint16_t);
    ++r->bf16_matrices;
  }
  std::stable_sort(out.begin(), out.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });
  std::map<std::string, std::string> metadata = in.metadata();
  metadata["tessera.matrices"] = "bf16";
  return write_safetensors(out_path, out, metadata);
}

}  // namespace

Status quantize_model_dir(const std::string& src, const std::string& dst, QuantizeReport* report,
                          const std::string& clip_vocab) {
  const std::string clip_vocab_fallback =
      clip_vocab.empty() ? default_clip_vocab_file() : clip_vocab;
  QuantizeReport local;
  QuantizeReport& r = report != nullptr ? *report : local;
  std::error_code ec;
  if (dst.empty()) return invalid_argument("quantize: no output directory given");
  if (fs::exists(dst, ec)) {
    return invalid_argument("output '" + dst +
                            "' already exists; give a new directory (nothing was overwritten)");
  }
  const fs::path src_abs = fs::weakly_canonical(src, ec);
  const fs::path dst_abs = fs::weakly_canonical(dst, ec);
  const auto rel = dst_abs.lexically_relative(src_abs);
  if (!rel.empty() && *rel.begin() != "..") {
    return invalid_argument("output '" + dst + "' is inside the model directory '" + src + "'");
  }
  ModelDirOptions options;
  options.clip_vocab_fallback = clip_vocab_fallback;
  TESSERA_ASSIGN_OR_RETURN(ModelDir model, open_model_dir(src, options));
  const std::string partial = dst_abs.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(partial, ec);
  const auto fail = [&](Status s) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    return s;
  };
  fs::create_directories(partial, ec);
  if (ec) return fail(io_error(partial + ": cannot create the directory: " + ec.message()));
  const fs::path gpt_path = fs::weakly_canonical(model.paths.shape_gpt, ec);
  const fs::path text_path = fs::weakly_canonical(model.paths.text_encoder, ec);
  const fs::path tokenizer_path = fs::weakly_canonical(model.paths.shape_tokenizer, ec);
  // Where the two rewritten files go: their place in src (a file outside src, e.g. a CLIP given
  // by a link, keeps its name at the top of dst).
  const fs::path src_plain = fs::absolute(src, ec).lexically_normal();
  const auto place = [&](const fs::path& file) {
    std::error_code e;
    const fs::path rel_path =
        fs::absolute(file, e).lexically_normal().lexically_relative(src_plain);
    if (rel_path.empty() || *rel_path.begin() == "..") return fs::path(partial) / file.filename();
    return fs::path(partial) / rel_path;
  };
  for (auto it = fs::recursive_directory_iterator(src_abs, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path rel_path = it->path().lexically_relative(src_abs);
    const fs::path target = fs::path(partial) / rel_path;
    std::error_code e;
    if (it->is_directory(e)) {
      fs::create_directories(target, e);
    } else if (it->is_regular_file(e)) {
      const fs::path canonical = fs::weakly_canonical(it->path(), e);
      if (canonical == gpt_path || canonical == text_path || canonical == tokenizer_path) continue;
      if (rel_path == "model.json") continue;  // rewritten below
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing, e);
      if (!e) r.copied.push_back(rel_path.string());
    }
    if (e) return fail(io_error(target.string() + ": cannot copy: " + e.message()));
  }
  if (ec) return fail(io_error(src + ": cannot list the directory: " + ec.message()));

  if (Status s = quantize_gpt_file(model.shape_gpt.file(),
                                   (fs::path(partial) / "shape_gpt.safetensors").string(), &r);
      !s.ok()) {
    return fail(s);
  }
  auto names = bf16_names(src, clip_vocab_fallback);
  if (!names.ok()) return fail(names.status());
  for (const auto& [store, list, file] :
       {std::tuple{&model.text_encoder, &names->text_encoder, &model.paths.text_encoder},
        std::tuple{&model.shape_tokenizer, &names->shape_tokenizer,
                   &model.paths.shape_tokenizer}}) {
    const fs::path target = place(*file);
    fs::create_directories(target.parent_path(), ec);
    if (Status s = write_bf16_matrices(store->file(), *list, target.string(), &r); !s.ok()) {
      return fail(s);
    }
  }

  const fs::path card = src_abs / "model.json";
  if (fs::is_regular_file(card, ec)) {
    auto text = read_file(card.string());
    if (!text.ok()) return fail(text.status());
    auto json = nlohmann::json::parse(*text, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
      return fail(corrupt_data(card.string() + ": not a JSON object"));
    }
    json["weights"] = "int8";
    const std::string out = json.dump(2) + "\n";
    if (Status s =
            write_file_atomic((fs::path(partial) / "model.json").string(), out.data(), out.size());
        !s.ok()) {
      return fail(s);
    }
    r.copied.push_back("model.json");
  }
  fs::rename(partial, dst_abs, ec);
  if (ec)
    return fail(io_error(dst + ": cannot move the finished model into place: " + ec.message()));
  return {};
}

}  // namespace tessera::runtime
