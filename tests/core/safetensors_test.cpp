#include "core/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tessera_st_" + std::to_string(::getpid()) + "_" + name;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file from a header text and `data_size` zero bytes of data; header_len overrides the length.
std::string make_file(const std::string& header, size_t data_size = 0,
                      std::optional<uint64_t> header_len = std::nullopt) {
  return le64(header_len.value_or(header.size())) + header + std::string(data_size, '\0');
}

constexpr const char* kName = "test.safetensors";

Status parse_status(const std::string& bytes) {
  auto st = SafeTensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kName);
  return st.status();
}

// Parses `bytes` and expects failure with `code` and a message naming the file and containing
// every one of `parts`.
void expect_error(const std::string& bytes, ErrorCode code, std::vector<std::string> parts) {
  const Status s = parse_status(bytes);
  ASSERT_FALSE(s.ok()) << "accepted: " << bytes.substr(8);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(kName), std::string::npos) << s.message();
  for (const auto& part : parts)
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
}

const std::string kGood = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";

TEST(SafeTensorsParse, MinimalValidFile) {
  const std::string bytes = make_file(kGood, 8);
  auto st = SafeTensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kName);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->size(), 1u);
  ASSERT_NE(st->find("a"), nullptr);
  EXPECT_EQ(st->find("a")->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(st->find("b"), nullptr);
  // parse() is zero-copy too: the view points into the caller's bytes.
  auto v = st->view("a");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(static_cast<const char*>(v->data), bytes.data() + 8 + kGood.size());
}

TEST(SafeTensorsParse, FileTooShort) {
  expect_error("", ErrorCode::kCorruptData, {"0 bytes", "too short"});
  expect_error("abc", ErrorCode::kCorruptData, {"3 bytes", "too short"});
}

TEST(SafeTensorsParse, HeaderLengthZero) {
  expect_error(make_file("", 4), ErrorCode::kCorruptData, {"header length is 0"});
}

TEST(SafeTensorsParse, HeaderLengthBeyondFile) {
  expect_error(make_file(kGood, 8, 100000), ErrorCode::kCorruptData,
               {"header length 100000", "exceeds the file size"});
  expect_error(make_file(kGood, 0, std::numeric_limits<uint64_t>::max()), ErrorCode::kCorruptData,
               {"exceeds the file size"});
}

TEST(SafeTensorsParse, HeaderLengthAbsurd) {
  // A header length beyond the 100 MB limit inside a (sparse) file that is large enough.
  const std::string path = temp_path("absurd.safetensors");
  write_bytes(path, le64(kSafetensorsMaxHeaderBytes + 1) + "{}");
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kSafetensorsMaxHeaderBytes + 64)), 0);
  auto st = SafeTensors::open(path);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), ErrorCode::kCorruptData);
  EXPECT_NE(st.status().message().find(path), std::string::npos);
  EXPECT_NE(st.status().message().find("exceeds the limit"), std::string::npos)
      << st.status().message();
  std::remove(path.c_str());
}

TEST(SafeTensorsParse, HeaderNotUtf8) {
  std::string header = R"({"a)";
  header += "\xff\xfe";
  header += R"(": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})";
  expect_error(make_file(header), ErrorCode::kCorruptData, {"not valid UTF-8", "byte 3"});
  // Overlong encoding of '/' and an encoded surrogate are invalid too.
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf", 2));
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80", 3));
  EXPECT_FALSE(is_valid_utf8("\xe2\x82", 2));  // truncated sequence
  EXPECT_TRUE(is_valid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
}

TEST(SafeTensorsParse, JsonSyntaxError) {
  expect_error(make_file(R"({"a": {"dtype": "F32",)"), ErrorCode::kCorruptData,
               {"not valid JSON", "byte"});
  expect_error(make_file(R"({"a": [1, }})"), ErrorCode::kCorruptData,
               {"not valid JSON", "byte 11"});
}

TEST(SafeTensorsParse, TopLevelNotObject) {
  expect_error(make_file("[1, 2]"), ErrorCode::kCorruptData, {"header is a JSON array"});
  expect_error(make_file("42"), ErrorCode::kCorruptData, {"expected an object"});
}

TEST(SafeTensorsParse, DuplicateTensorName) {
  const std::string header = R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                             R"( "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})";
  expect_error(make_file(header, 2), ErrorCode::kCorruptData, {"duplicate tensor name 'w'"});
  // Duplicate fields inside an entry or the metadata are rejected as well (the JSON parser alone
  // would silently keep the last one).
  const std::string nested =
      R"({"w": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})";
  expect_error(make_file(nested, 1), ErrorCode::kCorruptData, {"duplicate key 'dtype' inside 'w'"});
  expect_error(make_file(R"({"__metadata__": {"k": "1", "k": "2"}})"), ErrorCode::kCorruptData,
               {"duplicate key 'k' inside '__metadata__'"});
}

TEST(SafeTensorsParse, EntryNotObject) {
  expect_error(make_file(R"({"w": [1, 2]})"), ErrorCode::kCorruptData,
               {"tensor 'w'", "entry is a array", "expected an object"});
}

TEST(SafeTensorsParse, MissingField) {
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [0]}})"), ErrorCode::kCorruptData,
               {"tensor 'w'", "missing field 'data_offsets'"});
  expect_error(make_file(R"({"w": {"shape": [0], "data_offsets": [0, 0]}})"),
               ErrorCode::kCorruptData, {"tensor 'w'", "missing field 'dtype'"});
}

TEST(SafeTensorsParse, ExtraField) {
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0], "x": 1}})"),
               ErrorCode::kCorruptData, {"tensor 'w'", "unexpected field 'x'"});
}

TEST(SafeTensorsParse, UnsupportedDtype) {
  expect_error(
      make_file(R"({"w8": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})", 4),
      ErrorCode::kUnsupported, {"tensor 'w8'", "unsupported dtype 'F8_E4M3'"});
  expect_error(make_file(R"({"w": {"dtype": 4, "shape": [4], "data_offsets": [0, 4]}})", 4),
               ErrorCode::kCorruptData, {"tensor 'w'", "dtype is a number"});
}

TEST(SafeTensorsParse, BadShape) {
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": 4, "data_offsets": [0, 4]}})", 4),
               ErrorCode::kCorruptData, {"tensor 'w'", "shape is a number"});
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [2, -2], "data_offsets": [0, 4]}})", 4),
               ErrorCode::kCorruptData, {"tensor 'w'", "shape[1] is negative"});
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [2.5], "data_offsets": [0, 4]}})", 4),
               ErrorCode::kCorruptData, {"shape[0] is not an integer"});
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": ["4"], "data_offsets": [0, 4]}})", 4),
               ErrorCode::kCorruptData, {"shape[0] is a string"});
}

TEST(SafeTensorsParse, TooManyDims) {
  expect_error(
      make_file(R"({"w": {"dtype": "U8", "shape": [1,1,1,1,1,1,1], "data_offsets": [0, 1]}})", 1),
      ErrorCode::kUnsupported, {"tensor 'w'", "7 dimensions", "at most 6"});
}

TEST(SafeTensorsParse, ElementCountOverflow) {
  expect_error(
      make_file(
          R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
          4),
      ErrorCode::kCorruptData, {"tensor 'w'", "overflows"});
  // Fits in 64 bits as an element count but not as a byte count.
  expect_error(make_file(R"({"w": {"dtype": "F64", "shape": [4611686018427387904], )"
                         R"("data_offsets": [0, 8]}})",
                         8),
               ErrorCode::kCorruptData, {"overflows"});
}

TEST(SafeTensorsParse, BadDataOffsets) {
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0]}})", 4),
               ErrorCode::kCorruptData, {"tensor 'w'", "two integers"});
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, "4"]}})", 4),
               ErrorCode::kCorruptData, {"data_offsets[1] is a string"});
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [-1, 4]}})", 4),
               ErrorCode::kCorruptData, {"data_offsets[0] is negative"});
}

TEST(SafeTensorsParse, BeginAfterEnd) {
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", 4),
               ErrorCode::kCorruptData, {"tensor 'w'", "begin 4 is after end 0"});
}

TEST(SafeTensorsParse, EndBeyondDataSection) {
  expect_error(make_file(R"({"w": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})", 4),
               ErrorCode::kCorruptData,
               {"tensor 'w'", "end 8 is beyond the data section (4 bytes)"});
}

TEST(SafeTensorsParse, ByteSizeMismatch) {
  expect_error(make_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4),
               ErrorCode::kCorruptData, {"tensor 'w'", "span 4 bytes", "F32 [2] needs 8"});
}

TEST(SafeTensorsParse, OverlappingTensors) {
  const std::string header = R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                             R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})";
  expect_error(make_file(header, 6), ErrorCode::kCorruptData,
               {"tensor 'b' [2, 6) overlaps tensor 'a' [0, 4)"});
}

TEST(SafeTensorsParse, GapsAndTrailingBytesRejected) {
  const std::string gap = R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
                          R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})";
  expect_error(make_file(gap, 6), ErrorCode::kCorruptData,
               {"data section not fully covered", "bytes [2, 4) before tensor 'b'"});
  expect_error(make_file(kGood, 12), ErrorCode::kCorruptData,
               {"data section not fully covered", "4 trailing bytes"});
}

TEST(SafeTensorsParse, BadMetadata) {
  expect_error(make_file(R"({"__metadata__": ["x"]})"), ErrorCode::kCorruptData,
               {"__metadata__ is a array"});
  expect_error(make_file(R"({"__metadata__": {"format": 1}})"), ErrorCode::kCorruptData,
               {"__metadata__ entry 'format' is a number", "expected a string"});
}

TEST(SafeTensorsParse, PaddedHeaderZeroSizeAndScalar) {
  std::string header =
      R"({"__metadata__": {"format": "pt"}, "s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},)"
      R"( "z": {"dtype": "F16", "shape": [3, 0], "data_offsets": [4, 4]}})";
  header.append(13, ' ');
  const std::string bytes = make_file(header, 4);
  auto st = SafeTensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kName);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->metadata().at("format"), "pt");
  EXPECT_EQ(st->find("s")->numel(), 1);
  EXPECT_EQ(st->find("z")->numel(), 0);
  auto z = st->view("z");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->numel(), 0);
  EXPECT_EQ(z->ndim, 2);
  auto zf = st->to_f32("z");
  ASSERT_TRUE(zf.ok());
  EXPECT_TRUE(zf->empty());
  EXPECT_EQ(st->data_section_offset(), 8 + header.size());
}

TEST(SafeTensorsParse, EmptyHeaderObjectIsAnEmptyFile) {
  auto bytes = make_file("{}");
  auto st = SafeTensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kName);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->empty());
}

// ---- files --------------------------------------------------------------------------------------

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(SafeTensorsFile, RoundTripAllDtypesAndShapes) {
  const DType dtypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64,
                          DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool};
  const std::vector<std::vector<int64_t>> shapes = {
      {}, {0}, {1}, {7}, {3, 5}, {2, 0, 4}, {1, 2, 3, 2, 1, 3}};
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<TensorToWrite> tensors;
  uint32_t seed = 1;
  for (DType dt : dtypes) {
    for (const auto& shape : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      buffers.push_back(random_bytes(static_cast<size_t>(n) * dtype_size(dt), seed++));
      if (dt == DType::kBool)
        for (auto& b : buffers.back()) b &= 1;
      // Names in reverse-alphabetical order, to check that file order follows the given order.
      std::string name = "t";  // appended piecewise: GCC 12 -Wrestrict false positive
      name += std::to_string(1000 - tensors.size());
      name += ".";
      name += dtype_name(dt);
      tensors.push_back(TensorToWrite::raw(
          name, dt, shape, buffers.back().empty() ? nullptr : buffers.back().data()));
    }
  }
  const std::string path = temp_path("roundtrip.safetensors");
  const std::map<std::string, std::string> meta = {{"format", "pt"},
                                                   {"note", "h\xc3\xa9llo \"q\""}};
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());

  auto st = SafeTensors::open(path);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->metadata(), meta);
  EXPECT_EQ(st->data_section_offset() % 8, 0u);
  ASSERT_EQ(st->size(), tensors.size());
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& info = st->tensors()[i];
    EXPECT_EQ(info.name, tensors[i].name);  // data-offset order == write order
    EXPECT_EQ(info.dtype, tensors[i].dtype);
    EXPECT_EQ(info.shape, tensors[i].shape);
    EXPECT_EQ(info.nbytes, buffers[i].size());
    auto v = st->view(info.name);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->shape_vector(), tensors[i].shape);
    EXPECT_EQ(v->nbytes(), buffers[i].size());
    if (!buffers[i].empty()) {
      EXPECT_EQ(std::memcmp(v->data, buffers[i].data(), buffers[i].size()), 0) << info.name;
    }
    total += buffers[i].size();
  }
  EXPECT_EQ(st->total_bytes(), total);
  EXPECT_EQ(st->names().front(), tensors.front().name);
  std::remove(path.c_str());
}

// The address range and path of the /proc/self/maps line containing `p`, or "" if none.
std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0;
    unsigned long hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr < hi) return line;
  }
  return "";
}

TEST(SafeTensorsFile, ViewsPointIntoTheMapAndSurviveMoves) {
  std::vector<float> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  const std::string path = temp_path("zerocopy.safetensors");
  ASSERT_TRUE(
      write_safetensors(path, {TensorToWrite::raw("a", DType::kF32, {10, 100}, a.data())}).ok());
  auto opened = SafeTensors::open(path);
  ASSERT_TRUE(opened.ok());
  SafeTensors st = std::move(opened).value();
  auto v = st.view("a");
  ASSERT_TRUE(v.ok());
  // The view's bytes belong to a file-backed mapping of this very file: no copy was made.
  const std::string line = mapping_of(v->data);
  EXPECT_NE(line.find("zerocopy.safetensors"), std::string::npos) << line;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % 4096, st.data_section_offset() % 4096);
  EXPECT_TRUE(st.find("a")->aligned);
  // Moving the reader keeps the mapping (and so the view) alive.
  SafeTensors moved = std::move(st);
  EXPECT_EQ(moved.view("a")->data, v->data);
  EXPECT_EQ(v->as<float>()[999], 499.5f);
  std::remove(path.c_str());
}

TEST(SafeTensorsFile, F32ToBf16AndF16ConversionIsBitExact) {
  std::vector<float> src = {0.0f,
                            -0.0f,
                            1.0f,
                            -2.5f,
                            1.0f + std::ldexp(1.0f, -8),
                            65504.0f,
                            65520.0f,
                            1e-8f,
                            6e-8f,
                            1e-30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            3.14159265f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1e5f, 1e5f);
  while (src.size() < 70000)
    src.push_back(dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30));
  const int64_t n = static_cast<int64_t>(src.size());
  const std::string path = temp_path("convert.safetensors");
  ASSERT_TRUE(write_safetensors(path, {TensorToWrite::from_f32("bf", DType::kBF16, {n}, src.data()),
                                       TensorToWrite::from_f32("h", DType::kF16, {n}, src.data()),
                                       TensorToWrite::from_f32("f", DType::kF32, {n}, src.data())})
                  .ok());
  auto st = SafeTensors::open(path);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  const auto* bf = st->view("bf")->as<uint16_t>();
  const auto* h = st->view("h")->as<uint16_t>();
  auto bf32 = st->to_f32("bf");
  auto h32 = st->to_f32("h");
  auto f32 = st->to_f32("f");
  ASSERT_TRUE(bf32.ok() && h32.ok() && f32.ok());
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(bf[i], f32_to_bf16(src[i])) << i;
    ASSERT_EQ(h[i], f32_to_f16(src[i])) << i;
    ASSERT_EQ(f32_bits((*bf32)[i]), f32_bits(bf16_to_f32(bf[i]))) << i;
    ASSERT_EQ(f32_bits((*h32)[i]), f32_bits(f16_to_f32(h[i]))) << i;
    ASSERT_EQ(f32_bits((*f32)[i]), f32_bits(src[i])) << i;
  }
  // load_f32 checks the element count; integer tensors do not convert.
  std::vector<float> small(3);
  const Status wrong_n = st->load_f32("h", small.data(), small.size());
  EXPECT_EQ(wrong_n.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong_n.message().find("'h'"), std::string::npos);
  std::remove(path.c_str());
}

TEST(SafeTensorsFile, UnalignedTensorsAreAcceptedAndConvert) {
  // U8[1] at offset 0 puts the F16 tensor at an odd offset: legal, unaligned.
  const std::string header = R"({"b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                             R"( "h": {"dtype": "F16", "shape": [3], "data_offsets": [1, 7]},)"
                             R"( "i": {"dtype": "I32", "shape": [1], "data_offsets": [7, 11]}})";
  std::string padded = header;
  padded.append((8 - (8 + padded.size()) % 8) % 8, ' ');  // data section 8-aligned in the file
  std::string data(11, '\0');
  const uint16_t hv[3] = {f32_to_f16(1.5f), f32_to_f16(-2.0f), f32_to_f16(65504.0f)};
  std::memcpy(&data[1], hv, 6);
  const std::string path = temp_path("unaligned.safetensors");
  write_bytes(path, le64(padded.size()) + padded + data);
  auto st = SafeTensors::open(path);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_TRUE(st->find("b")->aligned);
  EXPECT_FALSE(st->find("h")->aligned);
  EXPECT_FALSE(st->find("i")->aligned);
  auto f = st->to_f32("h");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::vector<float>{1.5f, -2.0f, 65504.0f}));
  auto i = st->to_f32("i");
  EXPECT_EQ(i.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(i.status().message().find("'i' is I32"), std::string::npos) << i.status().message();
  std::remove(path.c_str());
}

TEST(SafeTensorsFile, MissingTensorAndShapeChecksNameEverything) {
  std::vector<float> a(6, 1.0f);
  const std::string path = temp_path("names.safetensors");
  ASSERT_TRUE(
      write_safetensors(path, {TensorToWrite::raw("w", DType::kF32, {2, 3}, a.data())}).ok());
  auto st = SafeTensors::open(path);
  ASSERT_TRUE(st.ok());
  auto missing = st->view("nope.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope.weight'"), std::string::npos);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);

  EXPECT_TRUE(st->view_as("w", DType::kF32, {2, 3}).ok());
  EXPECT_TRUE(st->expect("w", DType::kF32, {-1, 3}).ok());
  const Status bad_shape = st->expect("w", DType::kF32, {3, 2});
  EXPECT_EQ(bad_shape.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_shape.message().find("tensor 'w' is F32 [2, 3], expected F32 [3, 2]"),
            std::string::npos)
      << bad_shape.message();
  EXPECT_NE(bad_shape.message().find(path), std::string::npos);
  const Status bad_dtype = st->view_as("w", DType::kBF16, {2, 3}).status();
  EXPECT_NE(bad_dtype.message().find("expected BF16 [2, 3]"), std::string::npos);
  EXPECT_FALSE(st->expect("w", DType::kF32, {6}).ok());
  std::remove(path.c_str());
}

TEST(SafeTensorsFile, DirectoryAndMissingPath) {
  auto dir = SafeTensors::open(::testing::TempDir());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
  const std::string missing_path = temp_path("does-not-exist.safetensors");
  auto missing = SafeTensors::open(missing_path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(missing_path), std::string::npos);
  EXPECT_NE(missing.status().message().find("no such file"), std::string::npos);
}

TEST(SafeTensorsFile, TruncatedCopiesAreRejected) {
  std::vector<float> a(64, 2.0f);
  std::vector<uint16_t> b(10, 7);
  const std::string path = temp_path("full.safetensors");
  ASSERT_TRUE(write_safetensors(path, {TensorToWrite::raw("a", DType::kF32, {8, 8}, a.data()),
                                       TensorToWrite::raw("b", DType::kBF16, {10}, b.data())})
                  .ok());
  const std::string full = read_bytes(path);
  const std::string cut_path = temp_path("cut.safetensors");
  for (size_t keep :
       {size_t{0}, size_t{5}, size_t{8}, size_t{40}, full.size() - 21, full.size() - 1}) {
    write_bytes(cut_path, full.substr(0, keep));
    auto st = SafeTensors::open(cut_path);
    ASSERT_FALSE(st.ok()) << "kept " << keep << " of " << full.size();
    EXPECT_EQ(st.status().code(), ErrorCode::kCorruptData);
    EXPECT_NE(st.status().message().find(cut_path), std::string::npos) << st.status().message();
  }
  std::remove(path.c_str());
  std::remove(cut_path.c_str());
}

TEST(SafeTensorsFile, HeaderOnlyParseOfHugeSparseFile) {
  // A 3 GiB tensor in a sparse file: open() must not read the data (it would take seconds and
  // the disk blocks do not even exist).
  const uint64_t n = uint64_t{3} << 30;
  std::string header = R"({"big": {"dtype": "U8", "shape": [)" + std::to_string(n) +
                       R"(], "data_offsets": [0, )" + std::to_string(n) + "]}}";
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  const std::string path = temp_path("sparse.safetensors");
  write_bytes(path, le64(header.size()) + header);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(8 + header.size() + n)), 0);
  auto st = SafeTensors::open(path);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->total_bytes(), n);
  EXPECT_EQ(st->find("big")->numel(), static_cast<int64_t>(n));
  std::remove(path.c_str());
}

TEST(SafeTensorsWrite, RejectsBadInput) {
  float x = 1.0f;
  const std::string path = temp_path("bad_write.safetensors");
  auto expect_invalid = [&](const std::vector<TensorToWrite>& t, const std::string& part) {
    const Status s = write_safetensors(path, t);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << part;
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  };
  expect_invalid({TensorToWrite::raw("a", DType::kF32, {1}, &x),
                  TensorToWrite::raw("a", DType::kF32, {1}, &x)},
                 "duplicate name");
  expect_invalid({TensorToWrite::raw("a", DType::kF32, {1}, nullptr)}, "data is null");
  expect_invalid({TensorToWrite::raw("a", DType::kF32, {-1}, &x)}, "negative size");
  expect_invalid({TensorToWrite::raw("__metadata__", DType::kF32, {1}, &x)}, "reserved");
  expect_invalid({TensorToWrite::raw("a", DType::kF32, {1, 1, 1, 1, 1, 1, 1}, &x)}, "at most 6");
  expect_invalid({{"a", DType::kI32, {1}, &x, DType::kF32}}, "cannot convert F32 to I32");
  // Nothing was left behind at the destination.
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  const Status dir = write_safetensors(::testing::TempDir(), {});
  EXPECT_EQ(dir.code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
