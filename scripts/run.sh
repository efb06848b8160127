#!/usr/bin/env bash
# Builds (incrementally) and runs Tessera Studio on the embedded default model (tessera-tiny).
#   scripts/run.sh                 the studio (needs a display; without one, a scripted generation
#                                  runs under Xvfb and the screenshot is saved to studio-demo.png)
#   scripts/run.sh ARGS...         the studio with arguments (see tessera-studio --help)
#   scripts/run.sh cli ARGS...     the `tessera` command line tool instead (e.g. cli generate
#                                  --prompt "a torus" -o torus.obj)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh" >/dev/null
# The same configuration as scripts/test.sh (Release, warnings as errors, CUDA when nvcc exists), so
# that the test command reuses this build instead of compiling everything again.
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON \
    -DTESSERA_WITH_CUDA="${TESSERA_WITH_CUDA:-AUTO}" >build-configure.log 2>&1 \
    || { cat build-configure.log; exit 1; }
fi
if [[ "${1:-}" == "cli" ]]; then
  shift
  ninja -C build -j"${TESSERA_JOBS:-$(nproc)}" tessera >/dev/null
  exec build/app/cli/tessera "$@"
fi
ninja -C build -j"${TESSERA_JOBS:-$(nproc)}" tessera-studio >/dev/null
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
  exec build/app/tessera-studio "$@"
fi
echo "no display: running a scripted generation under Xvfb; screenshot -> studio-demo.png"
exec xvfb-run -a -s "-screen 0 1280x800x24" build/app/tessera-studio \
  --prompt "a torus" --generate --screenshot studio-demo.png --quit-when-done "$@"
