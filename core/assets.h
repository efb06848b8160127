// Where the embedded default assets (tessera-tiny, its diffusion model, the CLIP vocabulary) live,
// for every executable and test. This header is the one place that spells those paths: front ends
// ask the runtime (engine/runtime/capabilities.h), which asks here.
//
// The assets directory: $TESSERA_ASSETS when set, else <exe>/../share/tessera/assets (an installed
// or unpacked package), else the source tree's assets/ of the build (TESSERA_SOURCE_ASSETS,
// compiled into tessera_core). Never fails: callers report a missing model or vocabulary under the
// returned path, naming it.
//
// Threads: every function may be called from any thread; the environment is read on each call.
#pragma once

#include <string>

namespace tessera {

// The rule above with an explicit source-tree fallback (tests use it to check the order).
std::string find_assets_dir(const std::string& source_tree_assets);

// The rule above with this build's source tree as the fallback.
std::string assets_dir();

// <assets>/models/tessera-tiny: the embedded shape model (a Cube 3D layout directory).
std::string default_shape_model_dir();
// <assets>/models/tessera-tiny/diffusion: the embedded concept-image model.
std::string default_diffusion_model_dir();
// <assets>/vocab/clip: the folder of the real CLIP BPE vocabulary.
std::string default_clip_vocab_dir();
// <assets>/vocab/clip/bpe_simple_vocab_16e6.txt.gz: the vocabulary of models whose text encoder has
// CLIP's 49408 tokens but that ship no tokenizer files.
std::string default_clip_vocab_file();

}  // namespace tessera
