#include "engine/text/unicode.h"

#include <gtest/gtest.h>

namespace tessera::text {
namespace {

// Expected values below are what Python 3.11 (Unicode 14) returns for the same input.

std::string unescape(std::string_view utf8) {
  return to_utf8(html_unescape(decode_utf8_replace(utf8)));
}
std::string lower(std::string_view utf8) {
  return to_utf8(python_lower(decode_utf8_replace(utf8)));
}

TEST(Unicode, DecodeReplacesMaximalSubparts) {
  // b'\xe0\x80\xf0\x9f\x98a\xff\xed\xa0\x80'.decode('utf-8', 'replace')
  EXPECT_EQ(decode_utf8_replace("\xE0\x80\xF0\x9F\x98"
                                "a\xFF\xED\xA0\x80"),
            std::u32string(U"\uFFFD\uFFFD\uFFFDa\uFFFD\uFFFD\uFFFD\uFFFD"));
  EXPECT_EQ(decode_utf8_replace("\xF4\x90\x80\x80"), std::u32string(4, U'\uFFFD'));
  EXPECT_EQ(decode_utf8_replace("caf\xC3\xA9 \xF0\x9F\x90\xB1"), std::u32string(U"café 🐱"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9"));
  EXPECT_FALSE(is_valid_utf8("caf\xE9"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));  // a surrogate
  EXPECT_EQ(to_utf8(U"\U0001F431\u00E9a"),
            "\xF0\x9F\x90\xB1\xC3\xA9"
            "a");
}

TEST(Unicode, CharacterClasses) {
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(U'é'));
  EXPECT_TRUE(is_letter(U'東'));
  EXPECT_TRUE(is_letter(U'ǅ'));  // Lt
  EXPECT_FALSE(is_letter(U'1'));
  EXPECT_FALSE(is_letter(U'\u0301'));  // Mn
  EXPECT_FALSE(is_letter(U'🐱'));
  EXPECT_TRUE(is_number(U'7'));
  EXPECT_TRUE(is_number(U'½'));
  EXPECT_TRUE(is_number(U'Ⅻ'));
  EXPECT_TRUE(is_number(U'٣'));
  EXPECT_FALSE(is_number(U'x'));
  EXPECT_TRUE(is_regex_space(U'\u3000'));
  EXPECT_TRUE(is_regex_space(U'\u0085'));
  EXPECT_FALSE(is_regex_space(U'\u001C'));  // not White_Space ...
  EXPECT_TRUE(is_python_space(U'\u001C'));  // ... but str.isspace()
  EXPECT_FALSE(is_regex_space(U'\u200B'));
  EXPECT_TRUE(is_symbol(U'!'));
  EXPECT_TRUE(is_symbol(U'🐱'));
  EXPECT_FALSE(is_symbol(U'\u0345'));  // its upper case is a letter
  EXPECT_EQ(ascii_case_fold_equivalent(U'ſ'), 's');
  EXPECT_EQ(ascii_case_fold_equivalent(U'x'), 0);
}

TEST(Unicode, LowerMatchesPythonIncludingFinalSigma) {
  EXPECT_EQ(lower("HELLO World"), "hello world");
  // "ΟΔΟΣ. ΣΑ Σ ΑΣ'Σ".lower() == "οδος. σα σ ασ'ς"
  EXPECT_EQ(lower("ΟΔΟΣ. ΣΑ Σ ΑΣ'Σ"), "οδος. σα σ ασ'ς");
  EXPECT_EQ(lower("İ"), "i\xCC\x87");  // two code points
  EXPECT_EQ(lower("ẞǅÅ"), "ßǆå");
}

TEST(Unicode, HtmlUnescapeMatchesPython) {
  EXPECT_EQ(unescape("&amp;"), "&");
  EXPECT_EQ(unescape("&ampx"), "&x");
  EXPECT_EQ(unescape("&notit;"), "¬it;");
  EXPECT_EQ(unescape("&notin;"), "∉");
  EXPECT_EQ(unescape("&lt"), "<");
  EXPECT_EQ(unescape("&#65;&#x42;&#X43"), "ABC");
  EXPECT_EQ(unescape("&#128;"), "€");
  EXPECT_EQ(unescape("&#0;"), "\xEF\xBF\xBD");
  EXPECT_EQ(unescape("&#x110000;&#99999999999999999999;"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unescape("&#xD800;"), "\xEF\xBF\xBD");
  EXPECT_EQ(unescape("a&#1;b"), "ab");
  EXPECT_EQ(unescape("&#x81;"), "\xC2\x81");
  EXPECT_EQ(unescape("&unknown; & &# &&amp;"), "&unknown; & &# &&");
  EXPECT_EQ(unescape("&nbsp;x &quot;&apos;&gt;"), "\xC2\xA0x \"'>");
  EXPECT_EQ(unescape("&NotNestedGreaterGreater;"), "⪢̸");
  const std::string long_name = "&" + std::string(40, 'a') + ";";
  EXPECT_EQ(unescape(long_name), long_name);
  EXPECT_EQ(unescape("&amp;amp;"), "&amp;");  // one pass; CLIP applies it twice
}

}  // namespace
}  // namespace tessera::text
