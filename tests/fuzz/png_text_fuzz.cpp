// libFuzzer target for the PNG text chunks (core/png.h read_png_text / add_png_text), built
// with ASan/UBSan when TESSERA_FUZZ=ON: any bytes are read without reading past them; where the
// bytes are a PNG with its IHDR first, a text entry added is read back intact (after the ones the
// input already had, since it goes right after IHDR it comes first).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/png.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto text = tessera::read_png_text(bytes, "fuzz.png");
  if (!text.ok()) {
    if (text.status().message().find("fuzz.png") == std::string::npos) __builtin_trap();
    return 0;
  }
  auto added = tessera::add_png_text(bytes, {{"tessera", "{\"prompt\":\"a cube\"}"}});
  if (!added.ok()) return 0;
  auto back = tessera::read_png_text(*added, "fuzz.png");
  if (!back.ok() || back->empty()) __builtin_trap();
  if ((*back)[0].first != "tessera" || (*back)[0].second != "{\"prompt\":\"a cube\"}") {
    __builtin_trap();
  }
  return 0;
}
