// The shape tokens file: the ids of one shape on one line, separated by spaces (what
// `tessera generate --tokens-out` writes, `tessera decode --tokens` reads, and the library keeps
// beside each result as tokens.txt).
#pragma once

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"

namespace tessera::runtime {

// Writes `ids` to `path` atomically.
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
// against the model are the runtime's (Session::check_tokens).
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

}  // namespace tessera::runtime
