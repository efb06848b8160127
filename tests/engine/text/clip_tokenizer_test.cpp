#include "engine/text/clip_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/mapped_file.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

const std::string kVocabGz =
    std::string(TESSERA_SOURCE_DIR) + "/assets/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
const std::string kFixtures =
    std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/clip/expected_ids.json";

using Ids = std::vector<int32_t>;

const ClipTokenizer& real_tokenizer() {
  static const ClipTokenizer* tok = [] {
    auto loaded = ClipTokenizer::load(kVocabGz);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().to_string();
      std::abort();  // test setup only: every test below needs the real vocabulary
    }
    return new ClipTokenizer(std::move(loaded).value());
  }();
  return *tok;
}

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("tessera_clip_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, std::string_view contents) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// A gzip file holding `data` in one stored (uncompressed) deflate block: lets tests write small
// vocabularies in the original format without a compressor.
std::string gzip_stored(std::string_view data) {
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t crc = 0xFFFFFFFFu;
  for (char ch : data) crc = table[(crc ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (crc >> 8);
  crc ^= 0xFFFFFFFFu;
  auto le32 = [](std::string& s, uint32_t v) {
    for (int k = 0; k < 4; ++k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
  };
  EXPECT_LT(data.size(), 65536u);
  const auto len = static_cast<uint16_t>(data.size());
  std::string out = {'\x1f', '\x8b', '\x08', 0, 0, 0, 0, 0, 0, '\x03'};
  out.push_back(1);  // BFINAL, stored
  out.push_back(static_cast<char>(len & 0xFF));
  out.push_back(static_cast<char>(len >> 8));
  out.push_back(static_cast<char>(~len & 0xFF));
  out.push_back(static_cast<char>((~len >> 8) & 0xFF));
  out.append(data);
  le32(out, crc);
  le32(out, static_cast<uint32_t>(data.size()));
  return out;
}

struct FixtureCase {
  std::string text;
  Ids ids;
};

std::vector<FixtureCase> load_fixtures() {
  auto text = read_file(kFixtures);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  if (!text.ok()) return {};
  const auto doc = nlohmann::json::parse(*text);
  std::vector<FixtureCase> cases;
  for (const auto& c : doc.at("cases")) {
    FixtureCase fc;
    if (c.contains("text")) {
      fc.text = c.at("text").get<std::string>();
    } else {
      const std::string hex = c.at("bytes_hex").get<std::string>();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        fc.text.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
    }
    fc.ids = c.at("ids").get<Ids>();
    cases.push_back(std::move(fc));
  }
  return cases;
}

// Writes vocab.json + merges.txt derived from `tok` into `dir`.
void export_hf(const ClipTokenizer& tok, const TempDir& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id) {
    vocab[std::string(tok.id_to_token(id))] = id;
  }
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : tok.merges_in_rank_order()) merges += a + " " + b + "\n";
  dir.file("vocab.json", vocab.dump());
  dir.file("merges.txt", merges);
}

// ---- the real vocabulary -------------------------------------------------------------------

TEST(ClipTokenizer, LoadsTheRealVocabulary) {
  const auto start = std::chrono::steady_clock::now();
  auto tok = ClipTokenizer::load(kVocabGz);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  RecordProperty("load_ms", std::to_string(ms));
  EXPECT_EQ(tok->vocab_size(), 49408u);
  EXPECT_EQ(tok->num_merges(), 48894u);
  EXPECT_EQ(tok->bos_id(), 49406);
  EXPECT_EQ(tok->eos_id(), 49407);
  EXPECT_EQ(tok->token_to_id("!"), 0);
  EXPECT_EQ(tok->token_to_id("!</w>"), 256);
  EXPECT_EQ(tok->token_to_id("cat</w>"), 2368);
  EXPECT_EQ(tok->id_to_token(2368), "cat</w>");
  // The directory form finds the .gz too.
  auto from_dir = ClipTokenizer::load(fs::path(kVocabGz).parent_path().string());
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().to_string();
  EXPECT_EQ(from_dir->encode("a photo of a cat"), tok->encode("a photo of a cat"));
}

TEST(ClipTokenizer, APhotoOfACat) {
  EXPECT_EQ(real_tokenizer().encode("a photo of a cat"),
            (Ids{49406, 320, 1125, 539, 320, 2368, 49407}));
}

TEST(ClipTokenizer, HandDerivedCases) {
  const ClipTokenizer& tok = real_tokenizer();
  // Digits are split one per token: "1" is byte '1' + "</w>" ... each digit is its own piece.
  EXPECT_EQ(tok.encode("1234"), (Ids{49406, 272, 273, 274, 275, 49407}));
  EXPECT_EQ(tok.id_to_token(272), "1</w>");
  // Contractions are their own pieces: "it" + "'s", "don" + "'t".
  EXPECT_EQ(tok.encode("it's"), (Ids{49406, 585, 568, 49407}));
  EXPECT_EQ(tok.id_to_token(568), "'s</w>");
  EXPECT_EQ(tok.encode("don't"), (Ids{49406, 847, 713, 49407}));
  EXPECT_EQ(tok.id_to_token(713), "'t</w>");
  // Case and whitespace do not matter.
  EXPECT_EQ(tok.encode("A Photo Of A CAT"), tok.encode("a photo of a cat"));
  EXPECT_EQ(tok.encode("  a\tphoto \n\n of   a\r\ncat  "), tok.encode("a photo of a cat"));
  EXPECT_EQ(tok.encode("a\u3000photo\u00a0of a cat"), tok.encode("a photo of a cat"));
  // Entities are unescaped (twice), so these are the same text.
  EXPECT_EQ(tok.encode("cat &amp; dog"), tok.encode("cat & dog"));
  EXPECT_EQ(tok.encode("cat &amp;amp; dog"), tok.encode("cat & dog"));
  EXPECT_EQ(tok.encode("&#99;&#x61;t"), tok.encode("cat"));
  // Punctuation runs stay together; "," is 267 ("," + "</w>" merged).
  EXPECT_EQ(tok.encode("cat, dog"), (Ids{49406, 2368, 267, 1929, 49407}));
  // Accents and CJK go through byte-level BPE.
  EXPECT_EQ(tok.encode("café"), (Ids{49406, 15304, 49407}));
  EXPECT_EQ(tok.id_to_token(15304), "cafÃ©</w>");
  EXPECT_EQ(tok.encode("🐱"), (Ids{49406, 22979, 49407}));
  // Special tokens written in the text map to their ids.
  EXPECT_EQ(tok.encode("<|endoftext|>"), (Ids{49406, 49407, 49407}));
}

TEST(ClipTokenizer, EmptyPromptIsBosEos) {
  const ClipTokenizer& tok = real_tokenizer();
  EXPECT_EQ(tok.encode(""), (Ids{49406, 49407}));
  EXPECT_EQ(tok.encode(" \t\n "), (Ids{49406, 49407}));
  auto padded = tok.encode_padded("", 77, 49407);
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->length, 2);
  Ids expected(77, 49407);
  expected[0] = 49406;
  EXPECT_EQ(padded->ids, expected);
}

TEST(ClipTokenizer, MatchesThePythonReferenceOnFixtures) {
  const auto cases = load_fixtures();
  ASSERT_GE(cases.size(), 200u);
  const ClipTokenizer& tok = real_tokenizer();
  int mismatches = 0;
  for (const auto& c : cases) {
    const Ids got = tok.encode(c.text);
    if (got != c.ids && ++mismatches <= 10) {
      ADD_FAILURE() << "prompt " << ::testing::PrintToString(c.text) << "\n  expected "
                    << ::testing::PrintToString(c.ids) << "\n  got      "
                    << ::testing::PrintToString(got);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ClipTokenizer, HuggingFaceFormatGivesIdenticalIds) {
  TempDir dir;
  export_hf(real_tokenizer(), dir);
  auto hf = ClipTokenizer::load(dir.path());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ(hf->vocab_size(), 49408u);
  EXPECT_EQ(hf->num_merges(), 48894u);
  EXPECT_EQ(hf->bos_id(), 49406);
  EXPECT_EQ(hf->eos_id(), 49407);
  for (const auto& c : load_fixtures()) {
    EXPECT_EQ(hf->encode(c.text), c.ids) << ::testing::PrintToString(c.text);
  }
  // A model directory with a tokenizer/ subfolder, and a path to vocab.json, work too.
  TempDir model;
  fs::create_directories(fs::path(model.path()) / "tokenizer");
  fs::copy_file(fs::path(dir.path()) / "vocab.json",
                fs::path(model.path()) / "tokenizer/vocab.json");
  fs::copy_file(fs::path(dir.path()) / "merges.txt",
                fs::path(model.path()) / "tokenizer/merges.txt");
  auto nested = ClipTokenizer::load(model.path());
  ASSERT_TRUE(nested.ok()) << nested.status().to_string();
  EXPECT_EQ(nested->encode("a photo of a cat"), (Ids{49406, 320, 1125, 539, 320, 2368, 49407}));
  auto by_file = ClipTokenizer::load((fs::path(dir.path()) / "vocab.json").string());
  ASSERT_TRUE(by_file.ok()) << by_file.status().to_string();
}

TEST(ClipTokenizer, InvalidUtf8IsReplacedLikePython) {
  const ClipTokenizer& tok = real_tokenizer();
  // Python: b"caf\xe9".decode("utf-8", "replace") == "caf\ufffd".
  EXPECT_EQ(tok.encode("caf\xe9"), tok.encode("caf\xEF\xBF\xBD"));
  // One U+FFFD per maximal ill-formed subpart: E2 82 is one, then 'x'.
  EXPECT_EQ(tok.encode("\xE2\x82x"), tok.encode("\xEF\xBF\xBDx"));
  EXPECT_EQ(tok.encode("\xF0\x9F\x98"), tok.encode("\xEF\xBF\xBD"));
  EXPECT_EQ(tok.encode("\xC0\xAF"), tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD"));
  // NUL bytes are ordinary characters.
  const std::string with_nul("a\0b", 3);
  EXPECT_EQ(tok.encode(with_nul).size(), 5u);
}

TEST(ClipTokenizer, LongPromptIsFastAndTruncatesKeepingEos) {
  const ClipTokenizer& tok = real_tokenizer();
  std::string prompt;
  while (prompt.size() < 10000) prompt += "a small wooden house with a red roof, ";
  prompt.resize(10000);
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = tok.encode(prompt);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("encode_10k_ms", std::to_string(ms));
  EXPECT_GT(ids.size(), 2000u);
  EXPECT_EQ(ids.front(), 49406);
  EXPECT_EQ(ids.back(), 49407);

  auto padded = tok.encode_padded(prompt, 77, 49407);
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->length, 77);
  ASSERT_EQ(padded->ids.size(), 77u);
  EXPECT_EQ(padded->ids[0], 49406);
  EXPECT_EQ(padded->ids[76], 49407);
  EXPECT_EQ(Ids(padded->ids.begin(), padded->ids.begin() + 76), Ids(ids.begin(), ids.begin() + 76));

  // Adversarial single pieces (one long run of letters / of symbols) stay fast.
  std::string letters, emoji;
  for (int i = 0; i < 10000; ++i) letters.push_back(static_cast<char>('a' + (i * 7) % 26));
  for (int i = 0; i < 2500; ++i) emoji += "\xF0\x9F\x90\xB1";
  EXPECT_GT(tok.encode(letters).size(), 100u);
  EXPECT_GT(tok.encode(emoji).size(), 100u);
}

TEST(ClipTokenizer, PaddingAndTruncationEdges) {
  const ClipTokenizer& tok = real_tokenizer();
  auto padded = tok.encode_padded("a photo of a cat", 77, 0);  // open_clip pads with 0
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->length, 7);
  Ids expected = {49406, 320, 1125, 539, 320, 2368, 49407};
  expected.resize(77, 0);
  EXPECT_EQ(padded->ids, expected);

  auto exact = tok.encode_padded("a photo of a cat", 7, 0);  // fits exactly: no truncation
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->ids, (Ids{49406, 320, 1125, 539, 320, 2368, 49407}));
  auto cut = tok.encode_padded("a photo of a cat", 5, 0);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->ids, (Ids{49406, 320, 1125, 539, 49407}));
  EXPECT_EQ(cut->length, 5);
  auto minimal = tok.encode_padded("a photo of a cat", 2, 0);
  ASSERT_TRUE(minimal.ok());
  EXPECT_EQ(minimal->ids, (Ids{49406, 49407}));
  auto too_small = tok.encode_padded("cat", 1, 0);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), ErrorCode::kInvalidArgument);
}

TEST(ClipTokenizer, DecodeInvertsEncode) {
  const ClipTokenizer& tok = real_tokenizer();
  auto text = tok.decode(tok.encode("A photo of a Café, 1234 🐱!"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|startoftext|>a photo of a café , 1 2 3 4 🐱! <|endoftext|>");
  auto bad = tok.decode(Ids{320, 49408});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("49408"), std::string::npos);
  EXPECT_FALSE(tok.decode(Ids{-1}).ok());
  // Half of a multi-byte character decodes to U+FFFD, as Python's errors="replace".
  const int32_t e_high = tok.token_to_id("Ã");  // byte C3
  ASSERT_GE(e_high, 0);
  auto half = tok.decode(Ids{e_high});
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(*half, "\xEF\xBF\xBD");
}

TEST(ClipTokenizer, ConcurrentEncodeIsConsistent) {
  const ClipTokenizer& tok = real_tokenizer();
  const auto cases = load_fixtures();
  std::atomic<int> mismatches{0};
  auto worker = [&](size_t offset) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[(i + offset) % cases.size()];
      if (tok.encode(c.text) != c.ids) ++mismatches;
    }
  };
  std::thread a(worker, 0), b(worker, cases.size() / 2);
  a.join();
  b.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ClipTokenizer, NormalizeAndPreTokenize) {
  EXPECT_EQ(ClipTokenizer::normalize("  Hello\t\tWORLD &amp;amp; ΟΔΟΣ  "), "hello world & οδος");
  EXPECT_EQ(ClipTokenizer::pre_tokenize("It's 42 cats!!! <|endoftext|>"),
            (std::vector<std::string>{"it", "'s", "4", "2", "cats", "!!!", "<|endoftext|>"}));
  // U+0345 matches no alternative of the IGNORECASE pattern in the regex module: it is dropped.
  EXPECT_EQ(ClipTokenizer::pre_tokenize("a\xCD\x85"
                                        "b"),
            (std::vector<std::string>{"a", "b"}));
  // U+017F (long s) matches 's' case-insensitively.
  EXPECT_EQ(ClipTokenizer::pre_tokenize("'\xC5\xBFx"),
            (std::vector<std::string>{"'\xC5\xBF", "x"}));
  // Information separators are not \s for the regex module, but str.strip() removes them.
  EXPECT_EQ(ClipTokenizer::pre_tokenize("\x1c"
                                        "a\x1f"
                                        "b\x1c"),
            (std::vector<std::string>{"a", "\x1f", "b"}));
}

// ---- custom vocabularies and bad files -----------------------------------------------------

// A tiny vocabulary in the original format: the header, then merges.
constexpr std::string_view kTinyMerges = "#version: 0.2\nc a\nca t</w>\nd o\ndo g</w>\n";

TEST(ClipTokenizer, TinyCustomVocabularyInBothFormats) {
  TempDir dir;
  const std::string gz = dir.file("tiny.txt.gz", gzip_stored(kTinyMerges));
  auto tiny = ClipTokenizer::load(gz);
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_EQ(tiny->vocab_size(), 512u + 4 + 2);
  EXPECT_EQ(tiny->bos_id(), 516);
  EXPECT_EQ(tiny->eos_id(), 517);
  EXPECT_EQ(tiny->token_to_id("cat</w>"), 513);
  EXPECT_EQ(tiny->encode("Cat dog cab"),
            (Ids{516, 513, 515, 512, tiny->token_to_id("b</w>"), 517}));
  auto text = tiny->decode(tiny->encode("cat dog"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|startoftext|>cat dog <|endoftext|>");

  TempDir hf;
  export_hf(*tiny, hf);
  auto tiny_hf = ClipTokenizer::load(hf.path());
  ASSERT_TRUE(tiny_hf.ok()) << tiny_hf.status().to_string();
  EXPECT_EQ(tiny_hf->encode("Cat dog cab"), tiny->encode("Cat dog cab"));
}

void expect_error(const Status& st, ErrorCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const auto& part : parts) {
    EXPECT_NE(st.message().find(part), std::string::npos)
        << "message " << ::testing::PrintToString(st.message()) << " lacks " << part;
  }
}

TEST(ClipTokenizer, BadGzipFiles) {
  TempDir dir;
  const std::string missing = dir.path() + "/nope.txt.gz";
  expect_error(ClipTokenizer::load(missing).status(), ErrorCode::kNotFound, {missing});
  expect_error(ClipTokenizer::load_bpe_gz(dir.path()).status(), ErrorCode::kInvalidArgument,
               {dir.path(), "directory"});
  expect_error(ClipTokenizer::load(dir.path()).status(), ErrorCode::kNotFound,
               {dir.path(), "vocab.json"});
  const std::string plain = dir.file("plain.txt", kTinyMerges);
  expect_error(ClipTokenizer::load(plain).status(), ErrorCode::kCorruptData, {plain, "not a gzip"});
  const std::string empty = dir.file("empty.gz", "");
  expect_error(ClipTokenizer::load(empty).status(), ErrorCode::kCorruptData, {empty, "not a gzip"});

  auto real = read_file(kVocabGz);
  ASSERT_TRUE(real.ok());
  const std::string truncated = dir.file("truncated.gz", std::string_view(*real).substr(0, 100000));
  expect_error(ClipTokenizer::load(truncated).status(), ErrorCode::kCorruptData,
               {truncated, "truncated"});
  std::string flipped = *real;
  for (size_t i = 1000; i < 1100; ++i) flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
  const std::string corrupt = dir.file("corrupt.gz", flipped);
  expect_error(ClipTokenizer::load(corrupt).status(), ErrorCode::kCorruptData, {corrupt});

  const std::string bad_line =
      dir.file("bad_line.gz", gzip_stored("#version: 0.2\nc a\nthree parts here\n"));
  expect_error(ClipTokenizer::load(bad_line).status(), ErrorCode::kCorruptData,
               {bad_line, "malformed line 3", "three parts here"});
  const std::string blank = dir.file("blank.gz", gzip_stored("#version: 0.2\nc a\n\nd o\n"));
  expect_error(ClipTokenizer::load(blank).status(), ErrorCode::kCorruptData,
               {blank, "malformed line 3"});
  const std::string bad_utf8 = dir.file("bad_utf8.gz", gzip_stored("#version: 0.2\nc \xff\n"));
  expect_error(ClipTokenizer::load(bad_utf8).status(), ErrorCode::kCorruptData,
               {bad_utf8, "line 2", "UTF-8"});
  const std::string alien =
      dir.file("alien.gz", gzip_stored("#version: 0.2\nc \xC3\xA9\xE2\x82\xAC\n"));
  expect_error(ClipTokenizer::load(alien).status(), ErrorCode::kCorruptData,
               {alien, "U+20AC", "byte symbol"});
}

TEST(ClipTokenizer, BadHuggingFaceFiles) {
  const ClipTokenizer& tok = real_tokenizer();
  nlohmann::json good = nlohmann::json::object();
  for (int32_t id = 0; id < 512; ++id) good[std::string(tok.id_to_token(id))] = id;
  good["ca"] = 512;
  good["<|startoftext|>"] = 513;
  good["<|endoftext|>"] = 514;
  const std::string merges = "#version: 0.2\nc a\n";
  auto ok = ClipTokenizer::from_hf_text(good.dump(), merges, "v.json", "m.txt");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->vocab_size(), 515u);

  auto hf = [&](std::string_view vocab, std::string_view m) {
    return ClipTokenizer::from_hf_text(vocab, m, "v.json", "m.txt").status();
  };
  expect_error(hf("{\"a\": ", merges), ErrorCode::kCorruptData, {"v.json", "not valid JSON"});
  expect_error(hf("[1, 2]", merges), ErrorCode::kCorruptData, {"v.json", "JSON object"});
  nlohmann::json v = good;
  v["ca"] = "x";
  expect_error(hf(v.dump(), merges), ErrorCode::kCorruptData, {"v.json", "\"ca\"", "integer"});
  v = good;
  v["ca"] = -3;
  expect_error(hf(v.dump(), merges), ErrorCode::kCorruptData, {"v.json", "out of range"});
  v = good;
  v["ca"] = 7;
  expect_error(hf(v.dump(), merges), ErrorCode::kCorruptData, {"v.json", "id 7", "two tokens"});
  v = good;
  v.erase("<|endoftext|>");
  expect_error(hf(v.dump(), merges), ErrorCode::kCorruptData, {"v.json", "<|endoftext|>"});
  v = good;
  v.erase("a</w>");
  expect_error(hf(v.dump(), merges), ErrorCode::kCorruptData, {"v.json", "byte token", "a</w>"});
  expect_error(hf(good.dump(), "#version: 0.2\nc a\nd o\n"), ErrorCode::kCorruptData,
               {"m.txt", "line 3", "\"do\"", "not in the vocabulary"});
  expect_error(hf(good.dump(), "#version: 0.2\nc a\nonlyone\n"), ErrorCode::kCorruptData,
               {"m.txt", "malformed line 3"});

  TempDir dir;
  dir.file("vocab.json", good.dump());
  expect_error(ClipTokenizer::load(dir.path()).status(), ErrorCode::kNotFound, {"merges.txt"});
}

}  // namespace
}  // namespace tessera::text
