// The user's folders for Tessera's own files, as the runtime reads the environment (the XDG base
// folders): for front ends that keep files of their own (the server's token and results).
#pragma once

#include <string>

namespace tessera::runtime {

// XDG_DATA_HOME/tessera, else ~/.local/share/tessera.
std::string user_data_dir();
// XDG_CONFIG_HOME/tessera, else ~/.config/tessera.
std::string user_config_dir();

}  // namespace tessera::runtime
