// Unicode text helpers for the CLIP tokenizer: UTF-8 decoding with replacement, the character
// classes of CLIP's pre-tokenising regex, Python's str.lower() and html.unescape().
//
// Every table comes from tools/gen_unicode_tables.py, which reads them off the Python that CLIP's
// reference tokenizer runs on (unicodedata, str.isspace, str.lower, html.entities), so these
// functions agree with Python code point for code point (Unicode version: unicode_version()).
// Strings are UTF-32 (std::u32string) inside; bytes come in and go out as UTF-8.
// All functions are pure, thread-safe and never fail.
#pragma once

#include <string>
#include <string_view>

#include "core/utf8.h"  // append_utf8, which the text engine uses unqualified

namespace tessera::text {

// The Unicode version the tables were generated from, e.g. "14.0.0".
const char* unicode_version();

// Decodes UTF-8 as Python's bytes.decode("utf-8", errors="replace") does: each maximal ill-formed
// subsequence (W3C / Unicode "substitution of maximal subparts") becomes one U+FFFD. Overlong
// forms, surrogates (ED A0..BF ..) and code points above U+10FFFF are ill-formed.
std::u32string decode_utf8_replace(std::string_view utf8);

// True iff `utf8` is well-formed UTF-8 (same rules as above).
bool is_valid_utf8(std::string_view utf8);

// The UTF-8 encoding of `text` (core/utf8.h's append_utf8, code point by code point).
std::string to_utf8(std::u32string_view text);

// \p{L}: general category L* (Lu, Ll, Lt, Lm, Lo).
bool is_letter(char32_t cp);
// \p{N}: general category N* (Nd, Nl, No).
bool is_number(char32_t cp);
// \s of the `regex` module (CLIP's `import regex as re`): the White_Space property.
bool is_regex_space(char32_t cp);
// str.isspace(): what Python's str.strip() removes. White_Space plus U+001C..U+001F.
bool is_python_space(char32_t cp);

// What [^\s\p{L}\p{N}] matches under IGNORECASE in the regex module: not whitespace, not a
// letter or number, and no case variant that is one (which rules out U+0345, upper case Ι).
bool is_symbol(char32_t cp);

// Python's str.lower(): full lowercase mapping (U+0130 becomes two code points) including the
// Final_Sigma rule (U+03A3 becomes U+03C2 at the end of a word).
std::u32string python_lower(std::u32string_view text);

// Non-ASCII code points that a case-insensitive `regex` pattern matches against the ASCII letter
// returned (U+017F LATIN SMALL LETTER LONG S matches 's'); 0 for every other code point.
char ascii_case_fold_equivalent(char32_t cp);

// Python's html.unescape(): numeric references (&#123; &#x7B;, with or without ';', with the
// HTML5 fix-ups for invalid numbers) and all HTML5 named references (&amp; &nbsp; ..., including
// the legacy forms without ';' and the longest-prefix rule, e.g. "&ampx" -> "&x").
std::u32string html_unescape(std::u32string_view text);

}  // namespace tessera::text
