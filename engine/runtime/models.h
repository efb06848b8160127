// Models by name: the one table of the models Tessera knows (which files each needs, how large
// they are, what else it needs), and where they are on this machine: the Hugging Face cache, laid
// out as the Hub's own tools write it, so files that `huggingface-cli download` or Roblox's
// `cube3d` code fetched are used in place, without a copy.
//
// A model name (e.g. "Roblox/cube3d-v0.5") works wherever a model folder works: resolve_model_path
// turns it into a folder the loaders accept. A shape model's folder is a small view of links
// (shape GPT and tokenizer from its repository, its CLIP text encoder from the other one) under
// Tessera's own cache; an image model's is its snapshot folder. A folder path passes unchanged.
//
// The Hugging Face cache (docs/models.md): HF_HUB_CACHE, else HF_HOME/hub, else
// XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. A repository "ORG/NAME" lives in
// models--ORG--NAME/ with refs/<revision> (a file holding the commit), snapshots/<commit>/<path>
// (links to ../../blobs/<hash>) and blobs/.
//
// Threads: every function may be called from any thread; resolving writes the view atomically
// (built under a temporary name, then renamed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::runtime {

enum class ModelKind {
  kShape,        // text -> shape tokens -> mesh (Cube 3D); needs a CLIP text encoder
  kTextEncoder,  // CLIP, for the shape models
  kImage,        // SD 1.x in the diffusers layout
};
const char* model_kind_name(ModelKind kind);  // "shape", "text encoder", "image"

struct ModelFile {
  std::string path;      // inside the repository
  int64_t bytes = 0;     // its size (approximate for the large files: the listing, disk checks)
  bool required = true;  // false: used when present (configs a loader can do without)
};

struct KnownModel {
  std::string name;  // the Hugging Face repository, "ORG/NAME"
  ModelKind kind = ModelKind::kShape;
  std::string summary;
  std::vector<ModelFile> files;
  std::string text_encoder;  // shape models: the repository of the CLIP they condition on
  int64_t bytes() const;     // the files' sizes added up
};

// Every model Tessera knows by name, in the order a listing shows them.
const std::vector<KnownModel>& known_models();
// The entry named `name` (exact, case-sensitive as on the Hub); nullptr when unknown.
const KnownModel* find_known_model(std::string_view name);
// True when `text` is a repository name ("ORG/NAME": one slash, no leading '.', '/' or '~').
bool looks_like_model_name(std::string_view text);

// The Hugging Face hub cache folder (see above), whether or not it exists.
std::string hf_hub_cache_dir();
// Tessera's own cache (the shape models' views): XDG_CACHE_HOME/tessera, else ~/.cache/tessera.
std::string tessera_cache_dir();
// models--ORG--NAME under the hub cache.
std::string hf_repo_dir(std::string_view name);

// What the cache holds of one repository at one revision.
struct CachedModel {
  std::string name;
  std::string repo_dir;                       // models--ORG--NAME (may not exist)
  std::string revision;                       // as asked: a branch or tag ("main"), or a commit
  std::string commit;                         // what the revision points at ("": not in the cache)
  std::string snapshot_dir;                   // snapshots/<commit> ("": not in the cache)
  std::vector<std::string> present, missing;  // the model's files (missing: required ones)
  int64_t bytes_on_disk = 0;                  // of the present files, links followed
  bool complete() const { return !commit.empty() && missing.empty(); }
};
// Never fails for a known model: what is missing is in the answer. kNotFound for a name that is
// not in the table.
Expected<CachedModel> find_cached_model(std::string_view name, std::string_view revision = "main");

// A folder the loaders accept for `name_or_path`: a path (anything that is not a known model's
// name, or an existing folder) unchanged; a known model of `kind` from the cache. Errors
// (kNotFound) name the model, the files missing and where they were looked for, and the command
// that fetches them; kInvalidArgument when the name is a model of another kind.
Expected<std::string> resolve_model_path(const std::string& name_or_path, ModelKind kind);

// What a model folder is, for a front end to show: "ORG/NAME @ <commit, 7 characters>" when it is
// a known model's view or snapshot (the commit the cache holds), else the folder's own name.
std::string describe_model_path(const std::string& path);

// Deletes the repository `name` from the hub cache (and a shape model's view). kNotFound when it
// is not there; the error of the first file that cannot be removed otherwise.
Status remove_cached_model(std::string_view name);

}  // namespace tessera::runtime
