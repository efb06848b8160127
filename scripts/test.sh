#!/usr/bin/env bash
# Builds and runs every test: installs missing Debian packages, checks the formatting
# (clang-format), builds incrementally (build/), runs clang-tidy's checks (.clang-tidy), runs
# ctest (unit + cli; gpu tests skip cleanly without a device), then builds the libFuzzer targets with
# clang + ASan/UBSan (build-fuzz/) and runs each for a bounded time on its seed corpus, as many at
# once as there are jobs. Each stage prints the minutes since the start. A
# ThreadSanitizer build (build-tsan/) runs the thread pool and Session tests.
#
# Environment: TESSERA_FUZZ_SECONDS (default 30 per fuzzer, from the seeds plus the inputs that
# longer runs found, tests/fuzz/grown/; 0 skips fuzzing), TESSERA_JOBS (default
# nproc), TESSERA_WITH_CUDA (default AUTO: CUDA sources compile when nvcc exists), TESSERA_TSAN
# (default 1; 0 skips the ThreadSanitizer stage).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${TESSERA_JOBS:-$(nproc)}
fuzz_seconds=${TESSERA_FUZZ_SECONDS:-30}
# Each stage's start, with the minutes since the script began: where a run's time goes.
started=$SECONDS
stage() { echo "== [$(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s] $*"; }

"$root/scripts/setup.sh"

stage "format (clang-format, .clang-format): every tracked C++ and CUDA file"
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.inc' | xargs clang-format --dry-run -Werror \
  || { echo "clang-format: the files above differ (clang-format -i FILE)"; exit 1; }

stage "configure + build (Release, warnings as errors)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON \
  -DTESSERA_WITH_CUDA="${TESSERA_WITH_CUDA:-AUTO}" >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "Tessera:" build-configure.log || true
ninja -C build -j"$jobs"

stage "clang-tidy (.clang-tidy's checks): the runtime, the command line and the studio"
# GCC-only warning flags in the compile commands are not clang's to know. The pattern is anchored
# at the checkout: the sources of those three folders, not the tests that mirror their paths.
run-clang-tidy -p build -j "$jobs" -quiet -extra-arg=-Wno-unknown-warning-option \
  "^$root/(engine/runtime|app/cli|ui/studio)/[^/]*\.cpp\$" >clang-tidy.log 2>&1 \
  || { grep -E "(warning|error):" clang-tidy.log | grep -v "warnings generated" | sort -u; \
       echo "clang-tidy: see clang-tidy.log"; exit 1; }

stage "tests"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 600)

# The ThreadSanitizer and fuzzer builds exist to run their checks, not to ship: -O1 with line
# tables only (all a sanitizer's report needs for file:line stacks) builds them in less time than
# RelWithDebInfo's -O2 -g, and the sanitizers instrument every access either way. Both are unity
# builds (CMake joins up to 8 sources of a target into one translation unit): the same code and the
# same instrumentation in about a third less compile time (bench/RESULTS.md, "Test run"); a name in
# an anonymous namespace must therefore be unique among its target's sources.
if [[ "${TESSERA_TSAN:-1}" != "0" ]]; then
  stage "ThreadSanitizer: thread pool, Session lanes, Scheduler, the image lane and live previews (worker threads, cancel/replace)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_SANITIZE=thread \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DTESSERA_WITH_CUDA=OFF >build-tsan-configure.log 2>&1 || { cat build-tsan-configure.log; exit 1; }
  ninja -C build-tsan -j"$jobs" tessera_thread_tests
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    build-tsan/tests/tessera_thread_tests --gtest_filter='Session*:ThreadPool*:Scheduler*:RuntimeImageLane*:PreviewMesher*' --gtest_brief=1
fi

if [[ "$fuzz_seconds" != "0" ]]; then
  stage "fuzzers (clang, ASan+UBSan, ${fuzz_seconds}s each)"
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_FUZZ=ON -DTESSERA_BUILD_TESTS=ON -DTESSERA_WITH_CUDA=OFF \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    >build-fuzz-configure.log 2>&1 || { cat build-fuzz-configure.log; exit 1; }
  fuzzers=$(cd tests/fuzz && ls *_fuzz.cpp 2>/dev/null | sed 's/\.cpp$//')
  # All targets in one build (ninja keeps both cores busy across them), then the fuzzers `jobs` at
  # a time: each is one process on one core for its full ${fuzz_seconds}s, so every fuzzer keeps its
  # time and corpus and the stage takes 1/jobs of the wall time it took one after the other.
  # shellcheck disable=SC2086
  ninja -C build-fuzz -j"$jobs" $fuzzers
  run_fuzzer() {
    local f=$1 corpus="tests/fuzz/corpus/$1" work="build-fuzz/corpus-$1"
    mkdir -p "$work"
    # The inputs earlier long runs found (scripts/fuzz-grow.sh), so each run starts where they ended.
    if [[ -f "tests/fuzz/grown/$f.tar.gz" ]]; then tar -xzf "tests/fuzz/grown/$f.tar.gz" -C "$work"; fi
    LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
    "build-fuzz/tests/$f" -max_total_time="$fuzz_seconds" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 "$work" "$corpus" >"build-fuzz/$f.log" 2>&1
  }
  failed=""
  set -- $fuzzers
  while (($#)); do
    pids=() names=()
    for _ in $(seq "$jobs"); do
      (($#)) || break
      run_fuzzer "$1" & pids+=($!) names+=("$1")
      shift
    done
    for i in "${!pids[@]}"; do
      status=0
      wait "${pids[$i]}" || status=$?
      echo "-- ${names[$i]} (exit $status)"
      tail -n 12 "build-fuzz/${names[$i]}.log"
      ((status == 0)) || failed="$failed ${names[$i]}"
    done
  done
  [[ -z "$failed" ]] || { echo "fuzzers failed:$failed (build-fuzz/NAME.log)"; exit 1; }
fi
stage "end"
echo "== all tests passed"
