#include "engine/text/clip_tokenizer.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <utility>

#include "core/mapped_file.h"
#include "engine/text/unicode.h"

namespace tessera::text {

namespace {

constexpr const char* kStartOfText = "<|startoftext|>";
constexpr const char* kEndOfText = "<|endoftext|>";
constexpr const char* kEndOfWord = "</w>";
// simple_tokenizer.py: merges = lines[1 : 49152 - 256 - 2 + 1].
constexpr size_t kMaxGzMerges = 49152 - 256 - 2;
// A gzip vocabulary larger than this once inflated is not a CLIP vocabulary (the real one is
// 2.6 MB); the bound keeps a hostile file from exhausting memory.
constexpr size_t kMaxInflatedBytes = size_t{64} << 20;
// Ids above this are rejected: they would make the id -> token table absurdly large.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// BPE results of pieces up to this many bytes are cached; longer ones are rare and would bloat
// the cache. The cache is emptied when it reaches kMaxCacheEntries (a bound for adversarial input).
constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = size_t{1} << 16;

struct ByteAlphabet {
  char32_t byte_to_cp[256];
  int16_t cp_to_byte[512];  // the byte symbols are all below U+0200; -1 where none
  ByteAlphabet() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t{-1});
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves; the other 68 bytes
    // get U+0100.. in byte order, so no symbol is whitespace or a control character.
    bool printable[256] = {};
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      byte_to_cp[b] = printable[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
  // The vocabulary order of simple_tokenizer.py: list(bytes_to_unicode().values()), i.e. the
  // printable bytes in order, then the others in order.
  std::vector<uint8_t> vocab_order() const {
    std::vector<uint8_t> order;
    for (int pass = 0; pass < 2; ++pass) {
      for (int b = 0; b < 256; ++b) {
        if ((byte_to_cp[b] == static_cast<char32_t>(b)) == (pass == 0)) {
          order.push_back(static_cast<uint8_t>(b));
        }
      }
    }
    return order;
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

std::string byte_symbol(uint8_t b) {
  std::string s;
  append_utf8(s, byte_alphabet().byte_to_cp[b]);
  return s;
}

// A short, printable rendering of untrusted text for error messages.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 60;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out + "\"";
}

std::string codepoint_name(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

// Splits one line on Python whitespace (str.split() with no argument). `line` must be valid UTF-8.
std::vector<std::string_view> split_python_whitespace(std::string_view line) {
  std::vector<std::string_view> parts;
  size_t start = std::string_view::npos;
  size_t byte = 0;
  for (char32_t cp : decode_utf8_replace(line)) {
    const size_t len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (is_python_space(cp)) {
      if (start != std::string_view::npos) parts.push_back(line.substr(start, byte - start));
      start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = byte;
    }
    byte += len;
  }
  if (start != std::string_view::npos) parts.push_back(line.substr(start));
  return parts;
}

// Splits `text` at '\n' (Python's str.split('\n')).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (;;) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) {
      lines.push_back(text.substr(start));
      return lines;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
}

// Parses merge lines [first, end) of `lines` into pairs; `line_base` converts an index to the
// 1-based line number shown in errors.
Status parse_merge_lines(const std::vector<std::string_view>& lines, size_t first, size_t end,
                         const std::string& name,
                         std::vector<std::pair<std::string, std::string>>* merges,
                         std::vector<size_t>* merge_lines) {
  for (size_t i = first; i < end; ++i) {
    const std::string_view line = lines[i];
    if (!is_valid_utf8(line)) {
      return corrupt_data(name + ": line " + std::to_string(i + 1) + ": not valid UTF-8");
    }
    const auto parts = split_python_whitespace(line);
    if (parts.size() != 2) {
      return corrupt_data(name + ": malformed line " + std::to_string(i + 1) +
                          ": expected a merge of two symbols separated by a space, got " +
                          quote(line));
    }
    merges->emplace_back(std::string(parts[0]), std::string(parts[1]));
    merge_lines->push_back(i + 1);
  }
  return {};
}

Expected<std::string> inflate_gzip(std::span<const uint8_t> gz, const std::string& name) {
  if (gz.size() < 2 || gz[0] != 0x1F || gz[1] != 0x8B) {
    return corrupt_data(name +
                        ": not a gzip file (expected the bytes 1f 8b at the start); a "
                        "CLIP vocabulary is bpe_simple_vocab_16e6.txt.gz, or a directory "
                        "with vocab.json + merges.txt");
  }
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return internal_error(name + ": zlib init failed");
  std::string out;
  zs.next_in = const_cast<Bytef*>(gz.data());
  zs.avail_in = static_cast<uInt>(std::min<size_t>(gz.size(), UINT32_MAX));
  char buf[1 << 16];
  Status status;
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (out.size() > kMaxInflatedBytes) {
      status =
          corrupt_data(name + ": inflates to more than " + std::to_string(kMaxInflatedBytes >> 20) +
                       " MiB, not a CLIP vocabulary");
      break;
    }
    if (rc == Z_STREAM_END) {
      // Python's gzip module reads concatenated members; do the same.
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1F && zs.next_in[1] == 0x8B) {
        if (inflateReset(&zs) != Z_OK) {
          status = internal_error(name + ": zlib reset failed");
          break;
        }
        continue;
      }
      if (zs.avail_in != 0) {
        status = corrupt_data(name + ": " + std::to_string(zs.avail_in) +
                              " bytes of garbage after the gzip stream");
      }
      break;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      status = corrupt_data(name + ": truncated gzip stream (the file ends after " +
                            std::to_string(gz.size()) + " bytes, inside the compressed data)");
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      status =
          corrupt_data(name + ": corrupt gzip data (" + (zs.msg ? zs.msg : "zlib error") + ")");
      break;
    }
  }
  inflateEnd(&zs);
  if (!status.ok()) return status;
  return out;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) {
  return byte_alphabet().byte_to_cp[b];
}

struct ClipTokenizer::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> pieces;
};

ClipTokenizer::ClipTokenizer() : cache_(std::make_unique<Cache>()) {}
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

// ---- loading -----------------------------------------------------------------------------------

Expected<ClipTokenizer> ClipTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) return not_found(path + ": no such file or directory");
  if (fs::is_directory(p, ec)) {
    for (const fs::path& dir : {p, p / "tokenizer"}) {
      if (fs::exists(dir / "vocab.json", ec) || fs::exists(dir / "merges.txt", ec)) {
        return load_hf((dir / "vocab.json").string(), (dir / "merges.txt").string());
      }
    }
    if (fs::exists(p / kDefaultVocabFile, ec)) return load_bpe_gz((p / kDefaultVocabFile).string());
    return not_found(path +
                     ": directory holds no CLIP vocabulary (looked for vocab.json + "
                     "merges.txt, tokenizer/vocab.json + tokenizer/merges.txt, " +
                     std::string(kDefaultVocabFile) + ")");
  }
  const std::string filename = p.filename().string();
  if (filename == "vocab.json" || filename == "merges.txt") {
    return load_hf((p.parent_path() / "vocab.json").string(),
                   (p.parent_path() / "merges.txt").string());
  }
  return load_bpe_gz(path);
}

Expected<ClipTokenizer> ClipTokenizer::load_bpe_gz(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  return from_bpe_gz_bytes(std::span<const uint8_t>(file.data(), file.size()), path);
}

Expected<ClipTokenizer> ClipTokenizer::load_hf(const std::string& vocab_json_path,
                                               const std::string& merges_txt_path) {
  TESSERA_ASSIGN_OR_RETURN(std::string vocab, read_file(vocab_json_path));
  TESSERA_ASSIGN_OR_RETURN(std::string merges, read_file(merges_txt_path));
  return from_hf_text(vocab, merges, vocab_json_path, merges_txt_path);
}

Expected<ClipTokenizer> ClipTokenizer::from_bpe_gz_bytes(std::span<const uint8_t> gz,
                                                         const std::string& name) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, inflate_gzip(gz, name));
  return from_bpe_text(text, name);
}

Expected<ClipTokenizer> ClipTokenizer::from_bpe_text(std::string_view text,
                                                     const std::string& name) {
  // Python decodes the whole file strictly before splitting it.
  if (!is_valid_utf8(text)) {
    const auto lines = split_lines(text);
    for (size_t i = 0; i < lines.size(); ++i) {
      if (!is_valid_utf8(lines[i])) {
        return corrupt_data(name + ": line " + std::to_string(i + 1) + ": not valid UTF-8");
      }
    }
  }
  std::vector<std::string_view> lines;
  // Only the first kMaxGzMerges + 1 lines matter: stop splitting there.
  size_t start = 0;
  while (lines.size() < kMaxGzMerges + 1) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) {
      if (start < text.size()) lines.push_back(text.substr(start));  // no final '\n'
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  if (lines.empty()) return corrupt_data(name + ": empty vocabulary file (no header line)");
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> merge_lines;
  TESSERA_RETURN_IF_ERROR(parse_merge_lines(lines, 1, lines.size(), name, &merges, &merge_lines));

  // simple_tokenizer.py's vocabulary: byte symbols, byte symbols + "</w>", merges, specials.
  std::vector<std::pair<std::string, int32_t>> vocab;
  const auto order = byte_alphabet().vocab_order();
  for (uint8_t b : order) vocab.emplace_back(byte_symbol(b), static_cast<int32_t>(vocab.size()));
  for (uint8_t b : order) {
    vocab.emplace_back(byte_symbol(b) + kEndOfWord, static_cast<int32_t>(vocab.size()));
  }
  for (const auto& [a, b] : merges) vocab.emplace_back(a + b, static_cast<int32_t>(vocab.size()));
  vocab.emplace_back(kStartOfText, static_cast<int32_t>(vocab.size()));
  vocab.emplace_back(kEndOfText, static_cast<int32_t>(vocab.size()));
  return build(std::move(vocab), merges, merge_lines, name, name);
}

Expected<ClipTokenizer> ClipTokenizer::from_hf_text(std::string_view vocab_json,
                                                    std::string_view merges_txt,
                                                    const std::string& vocab_name,
                                                    const std::string& merges_name) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(vocab_json.begin(), vocab_json.end());
  } catch (const nlohmann::json::exception& e) {
    return corrupt_data(vocab_name + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object()) {
    return corrupt_data(vocab_name + ": expected a JSON object mapping token to id, got " +
                        std::string(doc.type_name()));
  }
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(doc.size());
  for (const auto& [token, value] : doc.items()) {
    if (!value.is_number_integer()) {
      return corrupt_data(vocab_name + ": token " + quote(token) + ": id is a " +
                          std::string(value.type_name()) + ", expected an integer");
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return corrupt_data(vocab_name + ": token " + quote(token) + ": id " + std::to_string(id) +
                          " out of range [0, " + std::to_string(kMaxTokenId) + "]");
    }
    vocab.emplace_back(token, static_cast<int32_t>(id));
  }
  std::sort(vocab.begin(), vocab.end(),
            [](const auto& x, const auto& y) { return x.second < y.second; });
  for (size_t i = 1; i < vocab.size(); ++i) {
    if (vocab[i].second == vocab[i - 1].second) {
      return corrupt_data(vocab_name + ": id " + std::to_string(vocab[i].second) +
                          " is used by two tokens, " + quote(vocab[i - 1].first) + " and " +
                          quote(vocab[i].first));
    }
  }

  // merges.txt: an optional "#version: ..." header, then one merge per line. Blank lines at
  // the end are ignored (Hugging Face strips the file first).
  std::vector<std::string_view> lines = split_lines(merges_txt);
  while (!lines.empty() && is_valid_utf8(lines.back()) &&
         split_python_whitespace(lines.back()).empty()) {
    lines.pop_back();
  }
  const size_t first = !lines.empty() && lines[0].starts_with("#version") ? 1 : 0;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> merge_lines;
  TESSERA_RETURN_IF_ERROR(
      parse_merge_lines(lines, first, lines.size(), merges_name, &merges, &merge_lines));
  return build(std::move(vocab), merges, merge_lines, vocab_name, merges_name);
}

Expected<ClipTokenizer> ClipTokenizer::build(
    std::vector<std::pair<std::string, int32_t>> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges,
    const std::vector<size_t>& merge_lines, const std::string& vocab_name,
    const std::string& merges_name) {
  const ByteAlphabet& alphabet = byte_alphabet();
  ClipTokenizer tok;
  tok.token_to_id_.reserve(vocab.size());
  int32_t max_id = -1;
  // Python builds dict(zip(vocab, ids)): a token listed twice keeps its last id.
  for (auto& [token, id] : vocab) {
    tok.token_to_id_[token] = id;
    max_id = std::max(max_id, id);
  }
  tok.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : tok.token_to_id_) {
    // Every token must be spelled in the byte alphabet, or decode() could not map it to bytes.
    for (char32_t cp : decode_utf8_replace(token)) {
      if (cp >= 512 || alphabet.cp_to_byte[cp] < 0) {
        return corrupt_data(vocab_name + ": token " + quote(token) + " (id " + std::to_string(id) +
                            ") contains " + codepoint_name(cp) +
                            ", which is not a byte symbol of bytes_to_unicode()");
      }
    }
    if (token.empty()) {
      return corrupt_data(vocab_name + ": empty token (id " + std::to_string(id) + ")");
    }
    tok.id_to_token_[static_cast<size_t>(id)] = token;
  }
  tok.num_id_gaps_ =
      static_cast<size_t>(std::count_if(tok.id_to_token_.begin(), tok.id_to_token_.end(),
                                        [](const std::string& s) { return s.empty(); }));

  for (int b = 0; b < 256; ++b) {
    const std::string symbol = byte_symbol(static_cast<uint8_t>(b));
    const int32_t id = tok.token_to_id(symbol);
    const int32_t end_id = tok.token_to_id(symbol + kEndOfWord);
    if (id < 0 || end_id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", b);
      return corrupt_data(vocab_name + ": missing the byte token " +
                          quote(id < 0 ? symbol : symbol + kEndOfWord) + " (byte " + hex +
                          "); a CLIP vocabulary holds all 256 byte symbols with and without </w>");
    }
    tok.byte_id_[b] = id;
    tok.byte_end_id_[b] = end_id;
  }
  tok.bos_id_ = tok.token_to_id(kStartOfText);
  tok.eos_id_ = tok.token_to_id(kEndOfText);
  if (tok.bos_id_ < 0 || tok.eos_id_ < 0) {
    return corrupt_data(vocab_name + ": missing the special token " +
                        std::string(tok.bos_id_ < 0 ? kStartOfText : kEndOfText));
  }

  // bpe_ranks = dict(zip(merges, range(len(merges)))): a repeated pair keeps its last rank.
  tok.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t result = tok.token_to_id(a + b);
    if (result < 0) {
      return corrupt_data(merges_name + ": line " + std::to_string(merge_lines[rank]) +
                          ": the merge " + quote(a) + " + " + quote(b) + " gives " + quote(a + b) +
                          ", which is not in the vocabulary (" + vocab_name + ")");
    }
    const int32_t left = tok.token_to_id(a);
    const int32_t right = tok.token_to_id(b);
    // A side that is no token never appears in a word, so such a merge can never apply.
    if (left < 0 || right < 0) continue;
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    tok.merges_[key] = MergeInfo{static_cast<int32_t>(rank), result};
  }
  tok.num_merges_ = merges.size();
  return tok;
}

int32_t ClipTokenizer::token_to_id(std::string_view token) const {
  const auto it = token_to_id_.find(std::string(token));
  return it == token_to_id_.end() ? -1 : it->second;
}

std::string_view ClipTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return {};
  return id_to_token_[static_cast<size_t>(id)];
}

std::vector<std::pair<std::string, std::string>> ClipTokenizer::merges_in_rank_order() const {
  std::vector<std::pair<int32_t, uint64_t>> ranked;
  ranked.reserve(merges_.size());
  for (const auto& [key, info] : merges_) ranked.emplace_back(info.rank, key);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(ranked.size());
  for (const auto& [rank, key] : ranked) {
    out.emplace_back(std::string(id_to_token(static_cast<int32_t>(key >> 32))),
                     std::string(id_to_token(static_cast<int32_t>(key & 0xFFFFFFFFu))));
  }
  return out;
}

// ---- text clean-up and pre-tokenising ----------------------------------------------------------

namespace {

std::u32string_view strip_python(std::u32string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_python_space(s[b])) ++b;
  while (e > b && is_python_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// basic_clean (without ftfy), whitespace_clean, lower().
std::u32string normalize_u32(std::string_view text) {
  std::u32string s = decode_utf8_replace(text);
  s = html_unescape(html_unescape(s));
  const std::u32string_view stripped = strip_python(s);
  // re.sub(r'\s+', ' ', text) with the regex module's \s.
  std::u32string collapsed;
  collapsed.reserve(stripped.size());
  for (size_t i = 0; i < stripped.size();) {
    if (is_regex_space(stripped[i])) {
      collapsed.push_back(U' ');
      while (i < stripped.size() && is_regex_space(stripped[i])) ++i;
    } else {
      collapsed.push_back(stripped[i++]);
    }
  }
  return python_lower(strip_python(collapsed));
}

// One character of a case-insensitive literal: `c` matches the pattern's ASCII `p` if equal up to
// ASCII case, or a case-fold equivalent (U+017F long s matches 's').
bool literal_matches(char32_t c, char p) {
  if (c == static_cast<char32_t>(p)) return true;
  if (p >= 'a' && p <= 'z') {
    return c == static_cast<char32_t>(p - 32) || ascii_case_fold_equivalent(c) == p;
  }
  return false;
}

size_t match_literal(std::u32string_view s, size_t i, std::string_view lit) {
  if (s.size() - i < lit.size()) return 0;
  for (size_t k = 0; k < lit.size(); ++k) {
    if (!literal_matches(s[i + k], lit[k])) return 0;
  }
  return lit.size();
}

// Calls `emit(begin, end)` for each match of CLIP's pattern, left to right, as regex.findall.
template <typename Emit>
void for_each_piece(std::u32string_view s, Emit&& emit) {
  static constexpr std::string_view kLiterals[] = {
      "<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    for (std::string_view lit : kLiterals) {
      if ((len = match_literal(s, i, lit)) != 0) break;
    }
    if (len == 0) {
      const char32_t c = s[i];
      if (is_letter(c)) {
        len = 1;
        while (i + len < s.size() && is_letter(s[i + len])) ++len;
      } else if (is_number(c)) {
        len = 1;
      } else if (is_symbol(c)) {
        len = 1;
        while (i + len < s.size() && is_symbol(s[i + len])) ++len;
      }
    }
    if (len == 0) {  // whitespace (or U+0345, see is_symbol): no match here
      ++i;
      continue;
    }
    emit(i, i + len);
    i += len;
  }
}

}  // namespace

std::string ClipTokenizer::normalize(std::string_view text) {
  return to_utf8(normalize_u32(text));
}

std::vector<std::string> ClipTokenizer::pre_tokenize(std::string_view text) {
  const std::u32string s = normalize_u32(text);
  std::vector<std::string> pieces;
  for_each_piece(s, [&](size_t b, size_t e) {
    pieces.push_back(to_utf8(std::u32string_view(s).substr(b, e - b)));
  });
  return pieces;
}

// ---- BPE
// -----------------------------------------------------------------------------------------

// CLIP's bpe(): repeatedly take the adjacent pair of lowest merge rank and merge all of its
// non-overlapping occurrences left to right, until no pair has a rank. Done here with a heap of
// (rank, position) over a linked list, one rank per round, which is the same computation in
// O(n log n) instead of O(n^2) (long runs of letters or symbols are ordinary input).
void ClipTokenizer::bpe_uncached(std::string_view piece, std::vector<int32_t>* out) const {
  const size_t n = piece.size();
  std::vector<int32_t> tok(n);
  std::vector<int32_t> next(n), prev(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<uint8_t>(piece[i]);
    tok[i] = i + 1 == n ? byte_end_id_[b] : byte_id_[b];
    next[i] = i + 1 == n ? -1 : static_cast<int32_t>(i + 1);
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  using Entry = std::pair<int32_t, int32_t>;  // (rank, position of the left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto lookup = [&](int32_t left) -> const MergeInfo* {
    const int32_t right = next[left];
    if (right < 0) return nullptr;
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(tok[left])) << 32) |
                         static_cast<uint32_t>(tok[right]);
    const auto it = merges_.find(key);
    return it == merges_.end() ? nullptr : &it->second;
  };
  auto push = [&](int32_t left) {
    if (left < 0) return;
    if (const MergeInfo* m = lookup(left)) heap.emplace(m->rank, left);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  std::vector<int32_t> round;
  while (!heap.empty()) {
    const int32_t rank = heap.top().first;
    round.clear();
    while (!heap.empty() && heap.top().first == rank) {
      round.push_back(heap.top().second);
      heap.pop();
    }
    // Positions come out in increasing order, i.e. left to right. Pairs created in this round
    // never have this rank (they contain the new token), so they wait for later rounds.
    for (int32_t pos : round) {
      if (!alive[static_cast<size_t>(pos)]) continue;
      const MergeInfo* m = lookup(pos);
      if (m == nullptr || m->rank != rank) continue;  // stale: a neighbour merged first
      const int32_t right = next[pos];
      tok[pos] = m->result;
      alive[static_cast<size_t>(right)] = 0;
      next[pos] = next[right];
      if (next[pos] >= 0) prev[next[pos]] = pos;
      push(prev[pos]);
      push(pos);
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out->push_back(tok[i]);
}

void ClipTokenizer::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() > kMaxCachedPieceBytes) {
    bpe_uncached(piece, out);
    return;
  }
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    const auto it = cache_->pieces.find(key);
    if (it != cache_->pieces.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out->size();
  bpe_uncached(piece, out);
  std::vector<int32_t> ids(out->begin() + static_cast<std::ptrdiff_t>(start), out->end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->pieces.size() >= kMaxCacheEntries) cache_->pieces.clear();
  cache_->pieces.emplace(std::move(key), std::move(ids));
}

// ---- encode / decode
// -----------------------------------------------------------------------------

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const {
  const std::u32string s = normalize_u32(text);
  std::vector<int32_t> ids;
  ids.reserve(s.size() / 2 + 2);
  ids.push_back(bos_id_);
  std::string piece;
  for_each_piece(s, [&](size_t b, size_t e) {
    piece.clear();
    for (size_t i = b; i < e; ++i) append_utf8(piece, s[i]);
    // simple_tokenizer.py seeds its cache with the two special tokens: they map to their ids
    // whole (only when spelled exactly; "<|ſtartoftext|>" also matches the IGNORECASE pattern
    // but goes through BPE like any other text).
    if (piece == kStartOfText) {
      ids.push_back(bos_id_);
    } else if (piece == kEndOfText) {
      ids.push_back(eos_id_);
    } else {
      bpe(piece, &ids);
    }
  });
  ids.push_back(eos_id_);
  return ids;
}

Expected<PaddedTokens> ClipTokenizer::encode_padded(std::string_view text, int context_length,
                                                    int32_t pad_id) const {
  if (context_length < 2) {
    return invalid_argument("encode_padded: context_length " + std::to_string(context_length) +
                            " is too small (BOS and EOS need 2)");
  }
  PaddedTokens result;
  result.ids = encode(text);
  const auto ctx = static_cast<size_t>(context_length);
  if (result.ids.size() > ctx) {
    result.ids.resize(ctx);
    result.ids.back() = eos_id_;
  }
  result.length = static_cast<int>(result.ids.size());
  result.ids.resize(ctx, pad_id);
  return result;
}

Expected<std::string> ClipTokenizer::decode(std::span<const int32_t> ids) const {
  std::string joined;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() ||
        id_to_token_[static_cast<size_t>(id)].empty()) {
      return invalid_argument("decode: id " + std::to_string(id) + " is not in the vocabulary (" +
                              std::to_string(vocab_size()) + " tokens)");
    }
    joined += id_to_token_[static_cast<size_t>(id)];
  }
  // Tokens were checked at load to be spelled in the byte alphabet.
  std::string bytes;
  bytes.reserve(joined.size());
  for (char32_t cp : decode_utf8_replace(joined)) {
    bytes.push_back(static_cast<char>(byte_alphabet().cp_to_byte[cp]));
  }
  std::string text = to_utf8(decode_utf8_replace(bytes));
  std::string out;
  out.reserve(text.size());
  const std::string_view eow = kEndOfWord;
  for (size_t i = 0; i < text.size();) {
    if (std::string_view(text).substr(i, eow.size()) == eow) {
      out.push_back(' ');
      i += eow.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace tessera::text
