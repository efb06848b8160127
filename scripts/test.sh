#!/usr/bin/env bash
# Builds and runs every test: installs missing Debian packages, checks the formatting
# (clang-format), builds incrementally (build/), runs clang-tidy's checks (.clang-tidy), runs
# ctest (unit + cli; gpu tests skip cleanly without a device), then builds the libFuzzer targets with
# clang + ASan/UBSan (build-fuzz/) and runs each for a bounded time on its seed corpus. A
# ThreadSanitizer build (build-tsan/) runs the thread pool and Session tests.
#
# Environment: TESSERA_FUZZ_SECONDS (default 60 per fuzzer, 0 skips fuzzing), TESSERA_JOBS (default
# nproc), TESSERA_WITH_CUDA (default AUTO: CUDA sources compile when nvcc exists), TESSERA_TSAN
# (default 1; 0 skips the ThreadSanitizer stage).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${TESSERA_JOBS:-$(nproc)}
fuzz_seconds=${TESSERA_FUZZ_SECONDS:-60}

"$root/scripts/setup.sh"

echo "== format (clang-format, .clang-format): every tracked C++ and CUDA file"
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.inc' | xargs clang-format --dry-run -Werror \
  || { echo "clang-format: the files above differ (clang-format -i FILE)"; exit 1; }

echo "== configure + build (Release, warnings as errors)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON \
  -DTESSERA_WITH_CUDA="${TESSERA_WITH_CUDA:-AUTO}" >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "Tessera:" build-configure.log || true
ninja -C build -j"$jobs"

echo "== clang-tidy (.clang-tidy's checks): the runtime, the command line and the studio"
# GCC-only warning flags in the compile commands are not clang's to know.
run-clang-tidy -p build -j "$jobs" -quiet -extra-arg=-Wno-unknown-warning-option \
  'engine/runtime/.*\.cpp$' 'app/cli/.*\.cpp$' 'ui/studio/.*\.cpp$' >clang-tidy.log 2>&1 \
  || { grep -E "(warning|error):" clang-tidy.log | grep -v "warnings generated" | sort -u; \
       echo "clang-tidy: see clang-tidy.log"; exit 1; }

echo "== tests"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 600)

if [[ "${TESSERA_TSAN:-1}" != "0" ]]; then
  echo "== ThreadSanitizer: thread pool, Session lanes, Scheduler, the image lane and live previews (worker threads, cancel/replace)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_SANITIZE=thread \
    -DTESSERA_WITH_CUDA=OFF >build-tsan-configure.log 2>&1 || { cat build-tsan-configure.log; exit 1; }
  ninja -C build-tsan -j"$jobs" tessera_thread_tests
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    build-tsan/tests/tessera_thread_tests --gtest_filter='Session*:ThreadPool*:Scheduler*:RuntimeImageLane*:PreviewMesher*' --gtest_brief=1
fi

if [[ "$fuzz_seconds" != "0" ]]; then
  echo "== fuzzers (clang, ASan+UBSan, ${fuzz_seconds}s each)"
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_FUZZ=ON -DTESSERA_BUILD_TESTS=ON -DTESSERA_WITH_CUDA=OFF \
    >build-fuzz-configure.log 2>&1 || { cat build-fuzz-configure.log; exit 1; }
  fuzzers=$(cd tests/fuzz && ls *_fuzz.cpp 2>/dev/null | sed 's/\.cpp$//')
  for f in $fuzzers; do
    ninja -C build-fuzz -j"$jobs" "$f"
    corpus="tests/fuzz/corpus/$f"
    work="build-fuzz/corpus-$f"
    mkdir -p "$work"
    echo "-- $f"
    LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
    "build-fuzz/tests/$f" -max_total_time="$fuzz_seconds" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 "$work" "$corpus" 2>&1 | tail -n 12
  done
fi
echo "== all tests passed"
