// Placeholder until the tokenize command lands (being written now); replaced, not extended.
#include "app/cli/commands.h"

namespace tessera::cli {
void register_tokenize(CLI::App& app, int* exit_code) {
  app.add_subcommand("tokenize", "(not built yet)")->callback([exit_code] { *exit_code = 1; });
}
}  // namespace tessera::cli
