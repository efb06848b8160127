// A model directory assembled from the parity fixtures (tests/fixtures/parity), for tests of the
// whole pipeline, the Session and the CLI.
//
// The fixtures hold the three checkpoints but no CLIP vocabulary (their CLIP has a tiny random
// 1000-row vocabulary). This writes a temporary directory with symlinks to the checkpoints and a
// Hugging Face vocabulary (vocab.json + merges.txt, no merges) in which every byte symbol is a
// token and the prompt kParityPrompt encodes to exactly the fixture's CLIP input ids
// [BOS 998, 5, 17, 42, 311, 7, 996, EOS 999] (expected.safetensors `clip.input_ids` row 0), so
// generating from it reproduces the fixture's greedy tokens.
//
// Header-only (inline) so that only the test binaries that include it depend on it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::testing {

// Single-letter words: each is one "x</w>" token.
inline constexpr const char* kParityPrompt = "a b c d e f";

class FixtureModelDir {
 public:
  // `name` makes the directory unique per test. v05: the GPT with the bbox token (else v0.1).
  // fill_token: writes a model.json with tokens.fill_token_id (tessera-tiny's model card field).
  explicit FixtureModelDir(const std::string& name, bool v05 = true,
                           std::optional<int> fill_token = std::nullopt) {
    namespace fs = std::filesystem;
    const fs::path parity = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "parity";
    dir_ = fs::temp_directory_path() /
           ("tessera-model-" + name + "-" + std::to_string(static_cast<long>(::getpid())));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::create_symlink(parity / (v05 ? "gpt_v05" : "gpt_v01") / "shape_gpt.safetensors",
                       dir_ / "shape_gpt.safetensors");
    fs::create_symlink(parity / "shape_tokenizer.safetensors",
                       dir_ / "shape_tokenizer.safetensors");
    fs::create_directory_symlink(parity / "text_encoder", dir_ / "text_encoder");
    write_vocab();
    if (fill_token) {
      std::ofstream(dir_ / "model.json")
          << "{\"name\": \"fixture\", \"tokens\": {\"fill_token_id\": " << *fill_token << "}}\n";
    }
  }
  ~FixtureModelDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  FixtureModelDir(const FixtureModelDir&) = delete;
  FixtureModelDir& operator=(const FixtureModelDir&) = delete;

  std::string path() const { return dir_.string(); }

 private:
  // CLIP's bytes_to_unicode(), UTF-8 encoded.
  static std::vector<std::string> byte_symbols() {
    std::vector<int> printable;
    for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
    std::vector<int> code(256, -1);
    for (int b : printable) code[static_cast<size_t>(b)] = b;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      if (code[static_cast<size_t>(b)] < 0) code[static_cast<size_t>(b)] = 256 + extra++;
    }
    std::vector<std::string> out;
    for (int cp : code) {
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      out.push_back(s);
    }
    return out;
  }

  static std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }

  void write_vocab() const {
    // The fixture's prompt ids for the words "a" .. "f".
    const std::map<std::string, int> fixed = {{"a</w>", 5},   {"b</w>", 17}, {"c</w>", 42},
                                              {"d</w>", 311}, {"e</w>", 7},  {"f</w>", 996}};
    std::vector<bool> used(1000, false);
    for (const auto& [token, id] : fixed) used[static_cast<size_t>(id)] = true;
    used[998] = used[999] = true;
    std::map<std::string, int> vocab = fixed;
    vocab["<|startoftext|>"] = 998;
    vocab["<|endoftext|>"] = 999;
    int next = 0;
    for (const std::string& sym : byte_symbols()) {
      for (const std::string& token : {sym, sym + "</w>"}) {
        if (vocab.count(token)) continue;
        while (used[static_cast<size_t>(next)]) ++next;
        used[static_cast<size_t>(next)] = true;
        vocab[token] = next;
      }
    }
    std::ofstream json(dir_ / "vocab.json");
    json << "{";
    bool first = true;
    for (const auto& [token, id] : vocab) {
      json << (first ? "" : ", ") << json_string(token) << ": " << id;
      first = false;
    }
    json << "}\n";
    std::ofstream(dir_ / "merges.txt") << "#version: 0.2\n";
  }

  std::filesystem::path dir_;
};

}  // namespace tessera::testing
