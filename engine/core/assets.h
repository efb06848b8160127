// Where the embedded default assets (tessera-tiny, the CLIP vocabulary) live, for every executable:
// $TESSERA_ASSETS when set, else <exe>/../share/tessera/assets (an installed or unpacked package),
// else `source_tree_assets` (a developer build run from its build directory). Never fails: the
// caller reports a missing model or vocabulary under the returned path.
#pragma once

#include <string>

namespace tessera {

std::string find_assets_dir(const std::string& source_tree_assets);

}  // namespace tessera
