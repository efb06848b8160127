// Pieces shared by `tessera generate` and `tessera decode`: the default model directory, output
// path checks, and the shape-tokens file format.
//
// Tokens file: the shape tokens of one object as decimal ids separated by spaces on one line
// (ending with a newline); readers accept any whitespace. Ids are codes of the model's codebook;
// the file does not name the model, so decode with the model that generated it.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/shape/pipeline.h"

namespace tessera::cli {

inline std::string default_model_dir() {
  return assets_dir() + "/models/tessera-tiny";
}

// The model directory to open: `given` (from --model) or the embedded default. A missing default
// gets its own message: the user did not name it and needs to know what to do.
inline Expected<std::string> resolve_model_dir(const std::string& given) {
  if (!given.empty()) return given;
  const std::string dir = default_model_dir();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return not_found(
        "no model given and the default model directory '" + dir +
        "' does not exist (the embedded tessera-tiny model is not installed in this "
        "build); pass --model DIR with a Cube 3D model directory (shape_gpt.safetensors, "
        "shape_tokenizer.safetensors and a CLIP text encoder)");
  }
  return dir;
}

inline shape::PipelineOptions cli_pipeline_options(bool bf16) {
  shape::PipelineOptions options;
  options.weights = bf16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  // Real CLIP checkpoints usually come without the vocabulary: use the bundled one.
  options.clip_vocab_fallback = assets_dir() + "/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
  return options;
}

// A file we will write at the end of a long run: check what can be checked up front (its
// directory exists) so that a typo does not cost a whole generation. `what` names the option.
inline Status check_output_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    return not_found(what + " '" + path + "': directory '" + parent.string() + "' does not exist");
  }
  if (fs::is_directory(path, ec)) return invalid_argument(what + " '" + path + "' is a directory");
  return Status();
}

// Mesh output: .obj or .glb (case-insensitive), in an existing directory.
inline Status check_mesh_output(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext != ".obj" && ext != ".glb") {
    return invalid_argument("output '" + path + "': unknown extension '" + ext +
                            "' (write .obj or .glb)");
  }
  return check_output_file(path, "output");
}

inline Status write_tokens_file(const std::string& path, const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  return write_file_atomic(path, line.data(), line.size());
}

// Parses a tokens file. Errors name the file and the offending entry (1-based); range checks
// against the model are the pipeline's (ShapePipeline::validate_tokens).
inline Expected<std::vector<int32_t>> read_tokens_file(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos >= text.size()) break;
    size_t end = pos;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    const std::string word = text.substr(pos, end - pos);
    char* stop = nullptr;
    errno = 0;
    const long long value = std::strtoll(word.c_str(), &stop, 10);
    if (stop != word.c_str() + word.size() || errno == ERANGE || value < INT32_MIN ||
        value > INT32_MAX) {
      const std::string shown = word.size() > 32 ? word.substr(0, 32) + "..." : word;
      return corrupt_data("tokens file '" + path + "': entry " + std::to_string(ids.size() + 1) +
                          " '" + shown + "' is not a token id (decimal integer)");
    }
    ids.push_back(static_cast<int32_t>(value));
    pos = end;
  }
  if (ids.empty()) return corrupt_data("tokens file '" + path + "' holds no token ids");
  return ids;
}

}  // namespace tessera::cli
