// libFuzzer target for the safetensors reader (built with ASan/UBSan when TESSERA_FUZZ=ON).
// Feeds the input through SafeTensors::parse (the path open() takes after mapping the file); on
// success reads every byte of every view and converts the float tensors, so an offset or size that
// slipped past validation shows up as an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint_kind.h"
#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto st = tessera::SafeTensors::parse(data, size, "fuzz.safetensors");
  if (!st.ok()) {
    // Every error carries a message naming the file.
    if (st.status().message().find("fuzz.safetensors") == std::string::npos) __builtin_trap();
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& info : st->tensors()) {
    auto view = st->view(info.name);
    if (!view.ok() || view->nbytes() != info.nbytes) __builtin_trap();
    const auto* bytes = static_cast<const uint8_t*>(view->data);
    for (size_t i = 0; i < view->nbytes(); ++i) sink = static_cast<uint8_t>(sink ^ bytes[i]);
    if (info.dtype == tessera::DType::kF32 || info.dtype == tessera::DType::kF16 ||
        info.dtype == tessera::DType::kBF16) {
      auto f = st->to_f32(info.name);
      if (!f.ok()) __builtin_trap();
    }
    (void)st->expect(info.name, info.dtype, info.shape);
  }
  (void)tessera::infer_checkpoint_kind(*st);
  (void)sink;
  return 0;
}
