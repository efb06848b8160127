// Standard base64 (RFC 4648: A-Z a-z 0-9 + /, '=' padding), for data: URIs in glTF files, meshes
// in tessera serve's event streams and pictures in its image jobs.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// With '=' padding.
std::string encode_base64(std::string_view bytes);
// '=' padding optional (decoding stops at the first '='), line breaks and spaces skipped; nullopt
// on any other character outside the alphabet.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace tessera
