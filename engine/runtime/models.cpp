#include "engine/runtime/models.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "engine/runtime/environment_internal.h"

namespace tessera::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kClipL = "openai/clip-vit-large-patch14";

// Sizes: the Cube 3D checkpoints' fp32 data bytes from their tensor lists (docs/cube3d.md), the
// others from their parameter counts in fp32; headers and small files are a few kB more.
std::vector<KnownModel> make_table() {
  std::vector<KnownModel> t;
  t.push_back({"Roblox/cube3d-v0.5",
               ModelKind::kShape,
               "Cube 3D v0.5: 1024 shape tokens, bounding-box conditioning",
               {{"shape_gpt.safetensors", 7'174'126'080, true},
                {"shape_tokenizer.safetensors", 1'095'094'404, true}},
               kClipL});
  t.push_back({"Roblox/cube3d-v0.1",
               ModelKind::kShape,
               "Cube 3D v0.1: 512 shape tokens",
               {{"shape_gpt.safetensors", 7'174'101'504, true},
                {"shape_tokenizer.safetensors", 1'091'948'676, true}},
               kClipL});
  t.push_back({kClipL,
               ModelKind::kTextEncoder,
               "CLIP ViT-L/14: the text encoder of the Cube 3D models (its text half is used)",
               {{"model.safetensors", 1'710'540'000, true},
                {"config.json", 4'519, false},
                {"vocab.json", 961'143, true},
                {"merges.txt", 524'619, true}},
               ""});
  t.push_back({"stable-diffusion-v1-5/stable-diffusion-v1-5",
               ModelKind::kImage,
               "Stable Diffusion 1.5 (diffusers layout): concept images",
               {{"unet/diffusion_pytorch_model.safetensors", 3'438'167'536, true},
                {"unet/config.json", 743, false},
                {"vae/diffusion_pytorch_model.safetensors", 334'643'268, true},
                {"text_encoder/model.safetensors", 492'265'168, true},
                {"text_encoder/config.json", 617, false},
                {"tokenizer/vocab.json", 1'059'962, true},
                {"tokenizer/merges.txt", 524'619, true}},
               ""});
  return t;
}

// 'text' (built by appending: GCC 12 misreads "'" + std::string(...) as an overlapping copy).
std::string in_quotes(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('\'');
  out.append(text);
  out.push_back('\'');
  return out;
}

std::string read_ref(const fs::path& file) {
  std::ifstream in(file);
  std::string commit;
  in >> commit;
  return commit;
}

bool is_commit(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string pull_command(const KnownModel& m) {
  return "tessera models pull " + m.name;
}

}  // namespace

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kShape:
      return "shape";
    case ModelKind::kTextEncoder:
      return "text encoder";
    case ModelKind::kImage:
      return "image";
  }
  return "?";
}

int64_t KnownModel::bytes() const {
  int64_t n = 0;
  for (const ModelFile& f : files) n += f.bytes;
  return n;
}

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> table = make_table();
  return table;
}

const KnownModel* find_known_model(std::string_view name) {
  for (const KnownModel& m : known_models()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

bool looks_like_model_name(std::string_view text) {
  if (text.empty() || text.front() == '.' || text.front() == '/' || text.front() == '~') {
    return false;
  }
  const size_t slash = text.find('/');
  return slash != std::string_view::npos && slash > 0 && slash + 1 < text.size() &&
         text.find('/', slash + 1) == std::string_view::npos;
}

std::string hf_hub_cache_dir() {
  if (std::string dir = env("HF_HUB_CACHE"); !dir.empty()) return dir;
  if (std::string home = env("HF_HOME"); !home.empty()) return (fs::path(home) / "hub").string();
  return (fs::path(cache_home()) / "huggingface" / "hub").string();
}

std::string tessera_cache_dir() {
  return (fs::path(cache_home()) / "tessera").string();
}

std::string hf_repo_dir(std::string_view name) {
  std::string folder = "models--";
  for (char c : name) {
    if (c == '/') {
      folder += "--";
    } else {
      folder += c;
    }
  }
  return (fs::path(hf_hub_cache_dir()) / folder).string();
}

Expected<CachedModel> find_cached_model(std::string_view name, std::string_view revision) {
  const KnownModel* model = find_known_model(name);
  if (model == nullptr) {
    return not_found(in_quotes(name) +
                     " is not a model Tessera knows (tessera models list names them)");
  }
  CachedModel c;
  c.name = model->name;
  c.repo_dir = hf_repo_dir(name);
  c.revision = std::string(revision);
  std::error_code ec;
  const fs::path repo(c.repo_dir);
  if (is_commit(revision) && fs::is_directory(repo / "snapshots" / c.revision, ec)) {
    c.commit = c.revision;
  } else {
    c.commit = read_ref(repo / "refs" / c.revision);
  }
  if (!c.commit.empty() && fs::is_directory(repo / "snapshots" / c.commit, ec)) {
    c.snapshot_dir = (repo / "snapshots" / c.commit).string();
  } else {
    c.commit.clear();
  }
  for (const ModelFile& f : model->files) {
    // A link whose blob was deleted by hand is missing, not present.
    const fs::path file = c.snapshot_dir.empty() ? fs::path() : fs::path(c.snapshot_dir) / f.path;
    if (!c.snapshot_dir.empty() && fs::is_regular_file(file, ec)) {
      c.present.push_back(f.path);
      const auto size = fs::file_size(file, ec);
      if (!ec) c.bytes_on_disk += static_cast<int64_t>(size);
    } else if (f.required) {
      c.missing.push_back(f.path);
    }
  }
  return c;
}

namespace {

// Links `link` -> `target`, replacing nothing (the view is built in a fresh folder).
Status make_link(const fs::path& target, const fs::path& link) {
  std::error_code ec;
  fs::create_symlink(target, link, ec);
  if (ec)
    return internal_error("cannot link " + link.string() + " -> " + target.string() + ": " +
                          ec.message());
  return Status();
}

// `fetch`: the model whose pull brings the missing files (a shape model's pull brings its CLIP).
std::string missing_message(const CachedModel& c, const KnownModel& m, const KnownModel& fetch) {
  std::string list;
  for (const std::string& f : c.missing) {
    if (!list.empty()) list += ", ";
    list += f;
  }
  if (c.commit.empty()) {
    return "model " + m.name + " is not in the Hugging Face cache (" + c.repo_dir +
           " has no snapshot for '" + c.revision + "'); fetch it with: " + pull_command(fetch);
  }
  return "model " + m.name + " is incomplete in the Hugging Face cache (" + c.snapshot_dir +
         " lacks " + list + "); fetch it with: " + pull_command(fetch);
}

// The shape model's view: its two checkpoints and its CLIP folder as links, in
// <tessera cache>/models/ORG/NAME (rebuilt when it points elsewhere).
Expected<std::string> shape_view(const CachedModel& shape, const CachedModel& clip) {
  const fs::path view = fs::path(tessera_cache_dir()) / "models" / shape.name;
  const fs::path gpt = fs::path(shape.snapshot_dir) / "shape_gpt.safetensors";
  const fs::path tok = fs::path(shape.snapshot_dir) / "shape_tokenizer.safetensors";
  const fs::path text = fs::path(clip.snapshot_dir);
  std::error_code ec;
  if (fs::read_symlink(view / "shape_gpt.safetensors", ec) == gpt && !ec &&
      fs::read_symlink(view / "shape_tokenizer.safetensors", ec) == tok && !ec &&
      fs::read_symlink(view / "text_encoder", ec) == text && !ec) {
    return view.string();
  }
  fs::create_directories(view.parent_path(), ec);
  if (ec) {
    return internal_error("cannot create " + view.parent_path().string() + ": " + ec.message());
  }
  const fs::path tmp =
      view.parent_path() / (view.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return internal_error("cannot create " + tmp.string() + ": " + ec.message());
  Status st = make_link(gpt, tmp / "shape_gpt.safetensors");
  if (st.ok()) st = make_link(tok, tmp / "shape_tokenizer.safetensors");
  if (st.ok()) st = make_link(text, tmp / "text_encoder");
  if (st.ok()) {
    fs::remove_all(view, ec);
    fs::rename(tmp, view, ec);
    if (ec && !fs::is_directory(view)) {  // another process may have put the same view there
      st = internal_error("cannot move " + tmp.string() + " to " + view.string() + ": " +
                          ec.message());
    }
  }
  fs::remove_all(tmp, ec);
  if (!st.ok()) return st;
  return view.string();
}

}  // namespace

Expected<std::string> resolve_model_path(const std::string& name_or_path, ModelKind kind) {
  const KnownModel* model = find_known_model(name_or_path);
  std::error_code ec;
  if (model == nullptr || fs::is_directory(name_or_path, ec)) {
    if (model == nullptr && looks_like_model_name(name_or_path) && !fs::exists(name_or_path, ec)) {
      std::string names;
      for (const KnownModel& m : known_models()) {
        if (m.kind != kind) continue;
        if (!names.empty()) names += ", ";
        names += m.name;
      }
      return not_found(in_quotes(name_or_path) +
                       " is neither a folder nor a model Tessera knows (" +
                       std::string(model_kind_name(kind)) + " models: " + names + ")");
    }
    return name_or_path;
  }
  if (model->kind != kind) {
    return invalid_argument(model->name + " is a " + model_kind_name(model->kind) +
                            " model, not a " + model_kind_name(kind) + " model");
  }
  TESSERA_ASSIGN_OR_RETURN(const CachedModel cached, find_cached_model(model->name));
  if (!cached.complete()) return not_found(missing_message(cached, *model, *model));
  if (kind != ModelKind::kShape) return cached.snapshot_dir;
  const KnownModel* clip = find_known_model(model->text_encoder);
  TESSERA_ASSIGN_OR_RETURN(const CachedModel text, find_cached_model(clip->name));
  if (!text.complete()) {
    return not_found(model->name +
                     " needs its text encoder: " + missing_message(text, *clip, *model));
  }
  return shape_view(cached, text);
}

std::string describe_model_path(const std::string& path) {
  const fs::path given = fs::path(path).lexically_normal();
  for (const KnownModel& m : known_models()) {
    const fs::path view = (fs::path(tessera_cache_dir()) / "models" / m.name).lexically_normal();
    const fs::path snapshots = (fs::path(hf_repo_dir(m.name)) / "snapshots").lexically_normal();
    std::string commit;
    if (given == view) {
      auto cached = find_cached_model(m.name);
      if (cached.ok()) commit = cached->commit;
    } else if (given.parent_path() == snapshots) {
      commit = given.filename().string();
    } else {
      continue;
    }
    return commit.empty() ? m.name : m.name + " @ " + commit.substr(0, 7);
  }
  fs::path p = given;
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

Status remove_cached_model(std::string_view name) {
  const KnownModel* model = find_known_model(name);
  if (model == nullptr) {
    return not_found(in_quotes(name) + " is not a model Tessera knows");
  }
  const fs::path repo(hf_repo_dir(name));
  std::error_code ec;
  if (!fs::exists(repo, ec)) {
    return not_found(model->name + " is not in the Hugging Face cache (" + repo.string() + ")");
  }
  fs::remove_all(repo, ec);
  if (ec) return internal_error("cannot remove " + repo.string() + ": " + ec.message());
  fs::remove_all(fs::path(tessera_cache_dir()) / "models" / model->name, ec);
  return Status();
}

}  // namespace tessera::runtime
