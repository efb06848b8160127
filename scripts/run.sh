#!/usr/bin/env bash
# Builds (incrementally) and runs Tessera. Until the studio lands this runs the `tessera` CLI on the
# embedded default assets: with no arguments it prints the version and tokenizes an example prompt;
# otherwise the arguments go to `tessera` (e.g. scripts/run.sh tokenize "a red torus").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh" >/dev/null
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
fi
ninja -C build -j"${TESSERA_JOBS:-$(nproc)}" tessera >/dev/null
if [[ $# -eq 0 ]]; then
  build/app/cli/tessera --version
  echo "\$ tessera tokenize \"a photo of a cat\""
  build/app/cli/tessera tokenize "a photo of a cat"
else
  exec build/app/cli/tessera "$@"
fi
