// UTF-8 encoding of one code point: the single encoder behind the text engine (engine/text), the
// UTF-16 text the mesh readers accept and the XML character references of 3MF metadata. Twenty
// lines of bit packing; std::codecvt (deprecated since C++17) and ICU would be the alternatives,
// neither worth a dependency for this.
#pragma once

#include <string>

namespace tessera {

// Appends the UTF-8 encoding of `cp` to `out`. A code point above U+10FFFF or a surrogate
// (U+D800..U+DFFF) is not a character: it is appended as U+FFFD, the replacement character.
void append_utf8(std::string& out, char32_t cp);

}  // namespace tessera
