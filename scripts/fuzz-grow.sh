#!/usr/bin/env bash
# Grows the fuzzers' starting corpora: runs each libFuzzer target for SECONDS (default 300) from its
# seeds (tests/fuzz/corpus/NAME/) plus what earlier runs kept (tests/fuzz/grown/NAME.tar.gz), then
# keeps the smallest set of inputs that reaches all the coverage found (libFuzzer's -merge=1) in
# tests/fuzz/grown/NAME.tar.gz. scripts/test.sh unpacks those archives into each fuzzer's work
# folder, so every test run starts where the long runs ended: a short run in CI then covers at least
# what the long one reached. Commit the archives it changes.
#
# Usage: scripts/fuzz-grow.sh [SECONDS] [FUZZER...]   (needs the build-fuzz/ of scripts/test.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${1:-300}
shift || true
fuzzers=("$@")
if ((${#fuzzers[@]} == 0)); then
  mapfile -t fuzzers < <(cd tests/fuzz && ls ./*_fuzz.cpp | sed 's|^\./||; s/\.cpp$//')
fi
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp"
for f in "${fuzzers[@]}"; do
  [[ -x "build-fuzz/tests/$f" ]] || { echo "build-fuzz/tests/$f missing: run scripts/test.sh first"; exit 1; }
  work=$(mktemp -d) kept=$(mktemp -d)
  if [[ -f "tests/fuzz/grown/$f.tar.gz" ]]; then tar -xzf "tests/fuzz/grown/$f.tar.gz" -C "$work"; fi
  "build-fuzz/tests/$f" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    "$work" "tests/fuzz/corpus/$f" >"build-fuzz/$f.grow.log" 2>&1 \
    || { echo "$f failed: build-fuzz/$f.grow.log"; exit 1; }
  # The seeds stay where they are; the archive holds only what they do not already cover.
  cp -r "tests/fuzz/corpus/$f/." "$kept/"
  "build-fuzz/tests/$f" -merge=1 -max_len=65536 -timeout=10 -rss_limit_mb=2048 "$kept" "$work" \
    >>"build-fuzz/$f.grow.log" 2>&1
  (cd "$kept" && for seed in "$root/tests/fuzz/corpus/$f"/*; do rm -f "$(basename "$seed")"; done)
  mkdir -p tests/fuzz/grown
  tar -C "$kept" -czf "tests/fuzz/grown/$f.tar.gz" --sort=name --owner=0 --group=0 \
    --numeric-owner --mtime=2026-01-01 .
  echo "$f: $(ls "$kept" | wc -l) inputs beyond the seeds, $(grep -a 'cov:' "build-fuzz/$f.grow.log" | tail -1)"
  rm -rf "$work" "$kept"
done
