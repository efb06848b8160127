#include "engine/text/unicode.h"

#include "core/utf8.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace tessera::text {

namespace {

struct CodepointRange {
  char32_t first;
  char32_t last;  // inclusive
};
struct LowerEntry {
  char32_t from;
  char32_t to;
  char32_t to2;  // second code point of a two-code-point mapping, else 0
};
struct FoldEntry {
  char32_t from;
  char ascii;
};
struct HtmlEntity {
  const char* name;  // as in html.entities.html5: "amp;", also legacy "amp"
  const char* utf8;
};

#include "engine/text/unicode_tables.inc"

constexpr char32_t kReplacement = 0xFFFD;

template <size_t N>
bool in_ranges(const CodepointRange (&table)[N], char32_t cp) {
  // The first range whose last >= cp is the only one that can hold it.
  const auto* it = std::lower_bound(std::begin(table), std::end(table), cp,
                                    [](const CodepointRange& r, char32_t c) { return r.last < c; });
  return it != std::end(table) && it->first <= cp;
}

// Decodes one code point at s[i] (i < s.size()). Returns the code point, or kReplacement for a
// maximal ill-formed subpart; *next is set past what was consumed. *ok tells the two apart when
// the input itself holds U+FFFD.
char32_t decode_one(std::string_view s, size_t i, size_t* next, bool* ok) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  *ok = true;
  if (b0 < 0x80) {
    *next = i + 1;
    return b0;
  }
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *next = i + 1;
    *ok = false;
    return kReplacement;
  }
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    const uint8_t low = k == 0 ? lo : 0x80;
    const uint8_t high = k == 0 ? hi : 0xBF;
    if (j >= s.size()) {
      *next = j;
      *ok = false;
      return kReplacement;
    }
    const auto b = static_cast<uint8_t>(s[j]);
    if (b < low || b > high) {
      *next = j;  // the offending byte starts the next subpart
      *ok = false;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *next = j;
  return cp;
}

bool is_case_ignorable(char32_t cp) {
  return in_ranges(kCaseIgnorableRanges, cp);
}
bool is_cased(char32_t cp) {
  return in_ranges(kCasedRanges, cp);
}

// CPython's handle_capital_sigma: U+03A3 lowercases to final sigma when a cased letter precedes
// it and none follows (case-ignorable code points in between are skipped on both sides).
char32_t lower_capital_sigma(std::u32string_view text, size_t i) {
  size_t j = i;
  char32_t c = 0;
  bool found = false;
  while (j > 0) {
    c = text[--j];
    if (!is_case_ignorable(c)) {
      found = true;
      break;
    }
  }
  bool final_sigma = found && is_cased(c);
  if (final_sigma) {
    for (j = i + 1; j < text.size(); ++j) {
      if (!is_case_ignorable(text[j])) break;
    }
    final_sigma = j == text.size() || !is_cased(text[j]);
  }
  return final_sigma ? 0x3C2 : 0x3C3;
}

bool is_ascii_digit(char32_t c) {
  return c >= '0' && c <= '9';
}
int hex_value(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

// html._replace_charref for a numeric reference whose value is `num` (saturated at 0x110000).
void append_numeric_charref(std::u32string& out, char32_t num) {
  const auto* inv =
      std::lower_bound(std::begin(kHtmlInvalidCharrefs), std::end(kHtmlInvalidCharrefs), num,
                       [](const LowerEntry& e, char32_t n) { return e.from < n; });
  if (inv != std::end(kHtmlInvalidCharrefs) && inv->from == num) {
    out.push_back(inv->to);
    return;
  }
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
    out.push_back(kReplacement);
    return;
  }
  if (std::binary_search(std::begin(kHtmlInvalidCodepoints), std::end(kHtmlInvalidCodepoints),
                         num)) {
    return;  // dropped
  }
  out.push_back(num);
}

const char* find_entity(std::string_view name) {
  const auto* it = std::lower_bound(
      std::begin(kHtmlEntities), std::end(kHtmlEntities), name,
      [](const HtmlEntity& e, std::string_view n) { return std::string_view(e.name) < n; });
  if (it != std::end(kHtmlEntities) && std::string_view(it->name) == name) return it->utf8;
  return nullptr;
}

void append_decoded(std::u32string& out, const char* utf8) {
  const std::u32string decoded = decode_utf8_replace(utf8);
  out += decoded;
}

// The characters the named-reference alternative [^\t\n\f <&#;] excludes.
bool ends_entity_name(char32_t c) {
  return c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' ||
         c == ';';
}

}  // namespace

const char* unicode_version() {
  return kUnicodeVersion;
}

std::u32string decode_utf8_replace(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  size_t i = 0;
  while (i < utf8.size()) {
    const auto b = static_cast<uint8_t>(utf8[i]);
    if (b < 0x80) {  // ASCII fast path
      out.push_back(b);
      ++i;
      continue;
    }
    bool ok = false;
    size_t next = 0;
    out.push_back(decode_one(utf8, i, &next, &ok));
    i = next;
  }
  return out;
}

bool is_valid_utf8(std::string_view utf8) {
  size_t i = 0;
  while (i < utf8.size()) {
    bool ok = false;
    size_t next = 0;
    decode_one(utf8, i, &next, &ok);
    if (!ok) return false;
    i = next;
  }
  return true;
}

std::string to_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(out, cp);
  return out;
}

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(kLetterRanges, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumberRanges, cp);
}

bool is_regex_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  return in_ranges(kRegexSpaceRanges, cp);
}

bool is_python_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1C && cp <= 0x1F);
  return in_ranges(kPySpaceRanges, cp);
}

bool is_symbol(char32_t cp) {
  return !is_regex_space(cp) && !is_letter(cp) && !is_number(cp) &&
         (cp < 0x80 || !in_ranges(kCaseVariantOfLetterOrNumberRanges, cp));
}

std::u32string python_lower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t cp = text[i];
    if (cp < 0x80) {
      out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
      continue;
    }
    if (cp == 0x3A3) {
      out.push_back(lower_capital_sigma(text, i));
      continue;
    }
    const auto* it = std::lower_bound(std::begin(kLowerMap), std::end(kLowerMap), cp,
                                      [](const LowerEntry& e, char32_t c) { return e.from < c; });
    if (it != std::end(kLowerMap) && it->from == cp) {
      out.push_back(it->to);
      if (it->to2 != 0) out.push_back(it->to2);
    } else {
      out.push_back(cp);
    }
  }
  return out;
}

char ascii_case_fold_equivalent(char32_t cp) {
  for (const FoldEntry& e : kFoldToAscii) {
    if (e.from == cp) return e.ascii;
  }
  return 0;
}

// Follows html.unescape: re.sub of
//   &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
// with _replace_charref, scanning left to right without overlaps.
std::u32string html_unescape(std::u32string_view text) {
  if (text.find(U'&') == std::u32string_view::npos) return std::u32string(text);
  std::u32string out;
  out.reserve(text.size());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (text[i] != U'&') {
      out.push_back(text[i++]);
      continue;
    }
    const size_t j = i + 1;
    if (j < n && text[j] == U'#') {
      size_t k = j + 1;
      char32_t num = 0;
      bool numeric = false;
      if (k < n && is_ascii_digit(text[k])) {
        numeric = true;
        for (; k < n && is_ascii_digit(text[k]); ++k) {
          num = std::min<char32_t>(num * 10 + (text[k] - U'0'), 0x110000);
        }
      } else if (k + 1 < n && (text[k] == U'x' || text[k] == U'X') && hex_value(text[k + 1]) >= 0) {
        numeric = true;
        for (++k; k < n && hex_value(text[k]) >= 0; ++k) {
          num = std::min<char32_t>(num * 16 + static_cast<char32_t>(hex_value(text[k])), 0x110000);
        }
      }
      if (!numeric) {  // '#' is excluded from the named alternative: no match at this '&'
        out.push_back(U'&');
        ++i;
        continue;
      }
      if (k < n && text[k] == U';') ++k;
      append_numeric_charref(out, num);
      i = k;
      continue;
    }
    size_t k = j;
    while (k < n && k - j < 32 && !ends_entity_name(text[k])) ++k;
    if (k == j) {
      out.push_back(U'&');
      ++i;
      continue;
    }
    const bool semicolon = k < n && text[k] == U';';
    const size_t end = k + (semicolon ? 1 : 0);
    const std::u32string_view name = text.substr(j, end - j);  // with its ';', as Python's `s`
    // Entity names are ASCII: only the leading ASCII part of `name` can match.
    std::string ascii;
    for (char32_t c : name) {
      if (c >= 0x80) break;
      ascii.push_back(static_cast<char>(c));
    }
    const char* value = ascii.size() == name.size() ? find_entity(ascii) : nullptr;
    if (value != nullptr) {
      append_decoded(out, value);
    } else {
      // The longest prefix of at least two characters that is an entity (legacy "&ampx").
      bool replaced = false;
      for (size_t x = std::min(name.size() - 1, ascii.size()); x >= 2 && x <= name.size(); --x) {
        if (const char* v = find_entity(std::string_view(ascii).substr(0, x))) {
          append_decoded(out, v);
          out.append(name.substr(x));
          replaced = true;
          break;
        }
      }
      if (!replaced) {
        out.push_back(U'&');
        out.append(name);
      }
    }
    i = end;
  }
  return out;
}

}  // namespace tessera::text
