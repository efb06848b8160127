#!/usr/bin/env bash
# The one script to run on a GPU machine (CUDA 13 toolkit, cmake, g++; no Qt, no internet, no apt).
#
#   scripts/gpu-deps.sh             # HERE, once: fetches the build's Debian packages into .deps/
#   scripts/gpu-check.sh            # THERE, from anywhere; builds in <repo>/build-gpu
#
# The device runner sends at most 64 MiB of working tree and the tracked training checkpoints alone
# are more: before the `run` call, take tools/train/records/ out of what travels (and restore it after):
#   git rm -r -q --cached tools/train/records && echo /tools/train/records/ >> .git/info/exclude     # before
#   git reset -q && sed -i '\#^/tools/train/records/$#d' .git/info/exclude                 # after
# and call run with carry [".deps"] and a command such as
#   GPU_CHECK_REV=<sha> bash scripts/gpu-check.sh; echo rc=$?
#
# Steps, most valuable first: configure (Release, CUDA on, GUI off, sm_90a only), build
# tessera_gpu_tests + the tessera CLI, nvidia-smi -L, `tessera --version`, the GPU test binary
# (fails if any test skipped: on a GPU machine a skip means probe_device() found no usable device),
# a tessera-tiny `generate --device cuda` with and without graphs (same tokens), `tessera-bench shape
# --device cuda --quick` (host loop, device-resident eager and CUDA-graph replay), `tessera image
# --device cuda` on the embedded diffusion model, `tessera-bench diffusion --device cuda` (SD 1.5
# 512x512 with the fused-kernel ablation), `tessera-bench shape --device cuda --weights int8`,
# `tessera-bench cleanup` (the CPU clean-up on this machine's cores), compute-sanitizer memcheck and racecheck on the small tests, and last a whole full-size int8 job
# from disk on the GPU with its peak device memory (`bench generate --device cuda`).
# Packages: when <repo>/.deps holds gpu-deps.tar.xz (scripts/gpu-deps.sh) or .deb files, they are unpacked into
# /tmp/gpu-deps (never /) and the build and the binaries use them. GPU_CHECK_CMAKE_ARGS adds cmake
# arguments. Every step's log goes to a work folder (/tmp/gpu-check); at the end $OUT (or ./gpu-out)
# receives at most 8 files: summary.txt, bench-shape.json, bench-shape-int8.json,
# bench-diffusion.json, RESULTS-gpu.md,
# gpu-tests.xml, torus.png and gpu-check.tgz (every log). A failed step is recorded and the script goes on; the summary table comes
# last, and the exit status is non-zero if any step failed or was skipped. The whole run stays under
# GPU_CHECK_BUDGET_S seconds (default 470): each step's timeout is cut to the time left.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$REPO/build-gpu"
RESULT_DIR="${OUT:-$PWD/gpu-out}"
OUT_DIR="${GPU_CHECK_WORK:-/tmp/gpu-check}"
rm -rf "$OUT_DIR"
BUDGET_S="${GPU_CHECK_BUDGET_S:-470}"
JOBS="${GPU_CHECK_JOBS:-16}"
mkdir -p "$OUT_DIR" "$RESULT_DIR"
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
EXTRA_CMAKE=()
if [[ -f "$REPO/.deps/gpu-deps.tar.xz" ]] || compgen -G "$REPO/.deps/*.deb" >/dev/null; then
  DEPS=/tmp/gpu-deps
  mkdir -p "$DEPS"
  if [[ -f "$REPO/.deps/gpu-deps.tar.xz" ]]; then
    tar -C "$DEPS" -xJf "$REPO/.deps/gpu-deps.tar.xz"
  else
    for deb in "$REPO"/.deps/*.deb; do dpkg -x "$deb" "$DEPS"; done
  fi
  LIBS="$DEPS/usr/lib/x86_64-linux-gnu"
  # pkg-config (cpp-httplib is found through it): the packages' own .pc files, their /usr paths
  # under $DEPS; the image's pkg-config when it has one, else the carried pkgconf.
  export PKG_CONFIG_LIBDIR="$LIBS/pkgconfig:$DEPS/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$DEPS"
  if ! command -v pkg-config >/dev/null && [[ -x "$DEPS/usr/bin/pkgconf" ]]; then
    EXTRA_CMAKE+=(-DPKG_CONFIG_EXECUTABLE="$DEPS/usr/bin/pkgconf")
  fi
  # dpkg -x skips the alternatives symlinks: point cmake at OpenBLAS's own folder.
  export LD_LIBRARY_PATH="$LIBS/openblas-pthread:$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  EXTRA_CMAKE+=(-DCMAKE_PREFIX_PATH="$DEPS/usr" -DCMAKE_LIBRARY_PATH="$LIBS/openblas-pthread;$LIBS"
                -DCMAKE_INCLUDE_PATH="$DEPS/usr/include;$DEPS/usr/include/x86_64-linux-gnu/openblas-pthread")
fi
# shellcheck disable=SC2206  # word splitting wanted
EXTRA_CMAKE+=(${GPU_CHECK_CMAKE_ARGS:-})
START_S=$SECONDS

STEP_NAMES=()
STEP_RESULTS=()
STEP_SECONDS=()
STEP_NOTES=()
FAILED=0

OPTIONAL=0  # 1 while the optional last steps run: one skipped for the time budget fails nothing
record() {  # name result seconds note
  STEP_NAMES+=("$1")
  STEP_RESULTS+=("$2")
  STEP_SECONDS+=("$3")
  STEP_NOTES+=("$4")
  if [[ "$2" != PASS ]] && ! ((OPTIONAL)) || [[ "$2" == FAIL ]]; then FAILED=1; fi
}

# run_step NAME TIMEOUT_S CMD...: runs CMD with output to the terminal and $OUT_DIR/NAME.log.
# Returns CMD's status (124 on timeout) without stopping the script.
run_step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((BUDGET_S - (SECONDS - START_S)))
  if ((left < 10)); then
    echo "== $name: skipped, time budget spent" | tee "$OUT_DIR/$name.log"
    record "$name" SKIP 0 "time budget (${BUDGET_S}s) spent"
    return 1
  fi
  ((limit > left)) && limit=$left
  echo "== $name (timeout ${limit}s): $*"
  local begin=$SECONDS rc=0
  set +e
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  local took=$((SECONDS - begin)) note=""
  ((rc == 124 || rc == 137)) && note="timed out after ${limit}s"
  ((rc != 0)) && [[ -z "$note" ]] && note="exit status $rc"
  if ((rc == 0)); then record "$name" PASS "$took" ""; else record "$name" FAIL "$took" "$note"; fi
  return "$rc"
}

skip_step() {  # name reason
  echo "== $1: skipped ($2)" | tee "$OUT_DIR/$1.log"
  record "$1" SKIP 0 "$2"
}

# ---- environment ----------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  echo "repo: $REPO (${GPU_CHECK_REV:-$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git')})"
  echo "deps: $(cat /tmp/gpu-deps/PACKAGES 2>/dev/null | tr '\n' ' ')$(ls "$REPO"/.deps/*.deb 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
  echo "host: $(uname -a)"
  echo "cpus: $(nproc)"
  command -v nvcc >/dev/null && nvcc --version || echo "nvcc: not in PATH"
  cmake --version | head -1 || true
  g++ --version | head -1 || true
  command -v ninja >/dev/null && echo "ninja $(ninja --version)" || echo "ninja: absent (Makefiles)"
  command -v nvidia-smi >/dev/null && nvidia-smi || echo "nvidia-smi: absent"
} >"$OUT_DIR/environment.log" 2>&1 || true

GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
if [[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${GENERATOR[1]:-Unix Makefiles}" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"  # a cache from another generator cannot be reused
fi

# ---- configure and build --------------------------------------------------------------------------
configured=0
if run_step configure 120 cmake -S "$REPO" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTESSERA_WITH_CUDA=ON -DTESSERA_WITH_GUI=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DTESSERA_BUILD_TESTS=ON \
  "${EXTRA_CMAKE[@]}"; then
  configured=1
else
  # Name what is missing: no internet here, so a missing package must be installed by hand.
  missing=$(grep -Eo "Could NOT find [A-Za-z0-9_]+|Could not find a package configuration file provided by \"[A-Za-z0-9_]+\"" \
    "$OUT_DIR/configure.log" | sed -E 's/.*(find |by ")//; s/"$//' | sort -u | tr '\n' ' ' || true)
  if [[ -n "$missing" ]]; then
    STEP_NOTES[-1]="missing packages: $missing(run scripts/gpu-deps.sh on the development machine and carry .deps)"
  fi
  [[ -f "$BUILD/CMakeFiles/CMakeConfigureLog.yaml" ]] && cp "$BUILD/CMakeFiles/CMakeConfigureLog.yaml" "$OUT_DIR/" || true
fi

built=0
if ((configured)); then
  if run_step build 300 cmake --build "$BUILD" -j "$JOBS" --target tessera_gpu_tests tessera tessera-bench; then
    built=1
  fi
else
  skip_step build "configure failed"
fi

# ---- device, tests, CLI (most valuable first) ------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
  run_step nvidia-smi 30 nvidia-smi -L || true
else
  record nvidia-smi FAIL 0 "nvidia-smi not found"
fi

GPU_TESTS="$BUILD/tests/tessera_gpu_tests"
CLI="$BUILD/app/cli/tessera"
BENCH="$BUILD/bench/tessera-bench"
if ((built)) && [[ -x "$CLI" ]]; then
  run_step cli-version 30 "$CLI" --version || true
  if ! grep -q "cuda: on, device" "$OUT_DIR/cli-version.log" 2>/dev/null && [[ "${STEP_RESULTS[-1]}" == PASS ]]; then
    STEP_RESULTS[-1]=FAIL
    STEP_NOTES[-1]="--version does not report a usable CUDA device"
    FAILED=1
  fi
else
  skip_step cli-version "CLI not built"
fi

if ((built)); then
  # One process for every GPU test (ctest would start CUDA and cuBLAS once per test). GTEST_SKIP
  # counts as passed; on this machine a skip means the device was not usable.
  run_step gpu-tests 150 "$GPU_TESTS" --gtest_output="xml:$OUT_DIR/gpu-tests.xml" || true
  skipped=$(grep -Eo '\[  SKIPPED \] [0-9]+ test' "$OUT_DIR/gpu-tests.log" | grep -Eo '[0-9]+' | head -1 || true)
  if [[ -n "$skipped" && "$skipped" != 0 ]]; then
    STEP_RESULTS[-1]=FAIL
    STEP_NOTES[-1]="${STEP_NOTES[-1]:+${STEP_NOTES[-1]}; }$skipped tests skipped: no usable CUDA device? (skip reasons in gpu-tests.log)"
    FAILED=1
  fi
else
  skip_step gpu-tests "not built"
fi

if ((built)) && [[ -x "$CLI" ]]; then
  run_step generate-tiny 60 "$CLI" generate --device cuda -v --prompt "a torus" \
    -o "$OUT_DIR/torus.obj" --tokens-out "$OUT_DIR/torus-graphs.txt" || true
  # The same job without CUDA graphs (every op launched each step): same tokens expected.
  run_step generate-tiny-eager 60 "$CLI" generate --device cuda -v --no-graphs --prompt "a torus" \
    -o "$OUT_DIR/torus-eager.obj" --tokens-out "$OUT_DIR/torus-eager.txt" || true
  if [[ -s "$OUT_DIR/torus-graphs.txt" && -s "$OUT_DIR/torus-eager.txt" ]]; then
    if cmp -s "$OUT_DIR/torus-graphs.txt" "$OUT_DIR/torus-eager.txt"; then
      record graphs-vs-eager PASS 0 "same tokens"
    else
      record graphs-vs-eager FAIL 0 "tokens differ between graph replay and eager launches"
    fi
  else
    skip_step graphs-vs-eager "a generate step failed"
  fi
  # The whole shape engine on the CUDA backend (host loop, device-resident eager, graph replay; KV
  # cache vs none): full-size v0.5 random bf16 weights + the parity fixture.
  run_step bench-shape 150 "$BENCH" shape --device cuda --quick \
    --json "$OUT_DIR/bench-shape.json" --results "$OUT_DIR/RESULTS-gpu.md" --write-results || true
  # The diffusion engine on the CUDA backend: the embedded model end to end (an image to look at),
  # then the SD 1.5 config (random weights, 512x512, guidance) with the fused-kernel ablation.
  run_step image-tiny 60 "$CLI" image --device cuda -v --prompt "a red torus" \
    -o "$OUT_DIR/torus.png" || true
  run_step bench-diffusion 150 "$BENCH" diffusion --device cuda --repeat 3 \
    --json "$OUT_DIR/bench-diffusion.json" --results "$OUT_DIR/RESULTS-gpu.md" --write-results || true
  # int8 weights on the CUDA backend (issue 25): TPOT and the int8-vs-bf16 steps alternated.
  run_step bench-shape-int8 120 "$BENCH" shape --device cuda --quick --weights int8 \
    --json "$OUT_DIR/bench-shape-int8.json" || true
  # The whole object's clean-up share: the CPU clean-up on this machine's cores (all, and one),
  # on an object-like and a random-weights-like surface.
  run_step bench-cleanup 90 "$BENCH" cleanup --repeat 3 --results "$OUT_DIR/RESULTS-gpu.md" \
    --write-results || true
else
  for s in generate-tiny generate-tiny-eager graphs-vs-eager bench-shape image-tiny bench-diffusion \
    bench-shape-int8 bench-cleanup; do
    skip_step "$s" "CLI not built"
  done
fi

if ((built)); then
  SANITIZER="$(command -v compute-sanitizer || true)"
  [[ -z "$SANITIZER" && -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ]] &&
    SANITIZER=/usr/local/cuda/compute-sanitizer/compute-sanitizer
  if [[ -n "$SANITIZER" ]]; then
    run_step memcheck 150 "$SANITIZER" --tool memcheck --error-exitcode 1 "$GPU_TESTS" \
      --gtest_filter='*Small*:CudaConvert.*:CudaBackendTest.*:GptCudaTest.Cached*:CudaDeviceStep.*:ChooseTokenTest.Bad*:GptCudaTest.GraphReplay*:CudaPolygonize.*:DiffusionCuda.UNetWithBf16*:CudaDiffusionConv.Bf16*' || true
    # Shared-memory hazards in the kernels that use barriers (attention, norms, softmax, the
    # token choice's sort and scans).
    run_step racecheck 120 "$SANITIZER" --tool racecheck --error-exitcode 1 "$GPU_TESTS" \
      --gtest_filter='CudaAttention.Small*:CudaNorms.SmallLayerNorm:CudaSoftmax.SmallShapes:ChooseTokenTest.Greedy*:CudaPolygonize.NoisyField*' || true
  else
    record memcheck FAIL 0 "compute-sanitizer not found (PATH, /usr/local/cuda/compute-sanitizer)"
    record racecheck FAIL 0 "compute-sanitizer not found"
  fi
else
  for s in memcheck racecheck; do skip_step "$s" "not built"; done
fi

# Peak device memory of a whole full-size job with int8 weights (issue 25: <= 4 GB for the whole
# pipeline, so that it runs on a 6 GB card): a random full-size directory in the release layout,
# quantized, then one job (1024 tokens + extraction at 257) through the Session on the GPU, whose
# memory in use is polled every 2 ms. Last and optional: the slowest steps (up to ~6 minutes), and
# the earlier ones matter more. A step skipped for the time budget does not fail the run (a rerun
# on the same machine reuses the build and gets here; GPU_CHECK_BUDGET_S raises the budget); a
# step that runs and fails does.
OPTIONAL=1
FULL_NEEDS_S=390  # make-model 120 + quantize 120 + the job 150: all or nothing
full_left=$((BUDGET_S - (SECONDS - START_S)))
if ((full_left < FULL_NEEDS_S)); then
  for s in make-model quantize generate-full-int8; do
    skip_step "$s" "time budget: ${full_left}s left, these steps need up to ${FULL_NEEDS_S}s"
  done
elif ((built)) && [[ -x "$CLI" ]]; then
  FULL=/tmp/gpu-check-full
  rm -rf "$FULL" "$FULL-int8"
  if ! run_step make-model 120 "$BENCH" make-model -o "$FULL"; then
    skip_step quantize "make-model: ${STEP_NOTES[-1]:-failed}"
    skip_step generate-full-int8 "make-model: ${STEP_NOTES[-2]:-failed}"
  elif ! run_step quantize 120 "$CLI" quantize --model "$FULL" -o "$FULL-int8"; then
    skip_step generate-full-int8 "quantize: ${STEP_NOTES[-1]:-failed}"
  else
    run_step generate-full-int8 150 "$BENCH" generate --device cuda --model "$FULL-int8" \
      --repeat 1 --warmup 0 -p "a chair" --results "$OUT_DIR/RESULTS-gpu.md" --write-results || true
  fi
  rm -rf "$FULL" "$FULL-int8"
else
  for s in make-model quantize generate-full-int8; do skip_step "$s" "CLI not built"; done
fi
OPTIONAL=0

# ---- summary --------------------------------------------------------------------------------------
summary() {
  echo
  echo "gpu-check summary ($(date -u +%FT%TZ), $((SECONDS - START_S))s, logs in $OUT_DIR)"
  printf '%-14s %-5s %6s  %s\n' STEP RESULT SECS NOTE
  local i
  for i in "${!STEP_NAMES[@]}"; do
    printf '%-14s %-5s %6s  %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}" "${STEP_SECONDS[$i]}" \
      "${STEP_NOTES[$i]}"
  done
  if [[ -f "$OUT_DIR/gpu-tests.log" ]]; then
    grep -E '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ test' "$OUT_DIR/gpu-tests.log" | sed 's/^/gpu tests: /' || true
  fi
  if ((FAILED)); then echo "RESULT: FAIL"; else echo "RESULT: PASS"; fi
}
summary | tee "$OUT_DIR/summary.txt"
# What comes back (the runner returns at most 8 files from $OUT): the summary, the benchmark JSON and
# markdown, the test XML, and every log in one archive.
for f in summary.txt bench-shape.json bench-shape-int8.json bench-diffusion.json RESULTS-gpu.md \
  gpu-tests.xml torus.png; do
  [[ -f "$OUT_DIR/$f" ]] && cp "$OUT_DIR/$f" "$RESULT_DIR/" || true
done
tar czf "$RESULT_DIR/gpu-check.tgz" --exclude="*.obj" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")" || true
exit "$FAILED"
