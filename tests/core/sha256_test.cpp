// SHA-256 against FIPS 180-4's examples, and files: streamed in blocks like in memory, errors
// named.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tessera {
namespace {

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, FilesStreamAndErrorsNameThePath) {
  const auto path = std::filesystem::temp_directory_path() / "tessera-sha256-test.bin";
  std::string data(3 * (1 << 20) + 12345, '\0');  // several read blocks and a partial one
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 131) ^ (i >> 9));
  std::ofstream(path, std::ios::binary)
      .write(data.data(), static_cast<std::streamsize>(data.size()));
  auto digest = sha256_file(path.string());
  ASSERT_TRUE(digest.ok()) << digest.status().to_string();
  EXPECT_EQ(*digest, sha256_hex(data.data(), data.size()));
  std::filesystem::remove(path);
  auto missing = sha256_file(path.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path.string()), std::string::npos);
}

}  // namespace
}  // namespace tessera
