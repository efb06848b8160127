#!/usr/bin/env bash
# What Assimp itself makes of the assimp-testmodels corpus, as `assimp info` (Debian's assimp-utils)
# reports it: per file, "opened" or "refused" and the primitive types of what it read. Written to
# tests/fixtures/corpus/assimp-info.tsv, the baseline tests/app/mesh_corpus_test.cpp holds Tessera
# against (same file selection: the nine mesh extensions, the invalid/ folders left out).
# Usage: tools/corpus/assimp_info_baseline.sh   (needs assimp-utils and assimp-testmodels)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus=/usr/share/assimp/models
out="$root/tests/fixtures/corpus/assimp-info.tsv"
command -v assimp >/dev/null || { echo "install assimp-utils first" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  echo "# tools/corpus/assimp_info_baseline.sh: assimp info $(assimp version 2>/dev/null | grep -o 'Version [0-9.]*' | head -1) on each assimp-testmodels file"
  cd "$corpus"
  find . -type f | grep -iv '/invalid/' | grep -iE '\.(obj|fbx|gltf|glb|stl|3mf|dae|ply|3ds)$' | sed 's|^\./||' | LC_ALL=C sort |
    while IFS= read -r f; do
      if timeout 60 assimp info "$f" >"$tmp" 2>&1; then
        types=$(grep -m1 '^Primitive Types:' "$tmp" | sed 's/^Primitive Types: *//; s/ *$//')
        printf '%s\topened\t%s\n' "$f" "${types:-none}"
      else
        printf '%s\trefused\t\n' "$f"
      fi
    done
} >"$out"
echo "$(grep -c $'\topened\t' "$out") of $(grep -vc '^#' "$out") opened -> $out"
