#!/bin/sh
# Contact sheet of what the C++ engine makes of the first prompts (tools/train/first_prompts.tsv), with
# the CLI's defaults (the studio's too: greedy, guidance 3, the model's default resolution, default
# clean-up), rendered lit by `tessera render`, one tile per prompt labelled with it.
# Usage: tools/train/first_prompts_sheet.sh OUT.png [GROUP] [MODEL_DIR]
#   GROUP: a-family (default), bare, synonym, size or all. Needs build/app/cli/tessera and ImageMagick.
set -eu
out=${1:?usage: first_prompts_sheet.sh OUT.png [GROUP] [MODEL_DIR]}
group=${2:-a-family}
model=${3:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
tessera=${TESSERA:-$root/build/app/cli/tessera}
[ -x "$tessera" ] || { echo "$tessera: not built (cmake --build build)" >&2; exit 1; }
command -v montage >/dev/null || { echo "montage (ImageMagick) is missing: scripts/setup.sh installs it" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
i=0
grep -v '^#' "$root/tools/train/first_prompts.tsv" | while IFS="$(printf '\t')" read -r family prompt check g; do
  [ "$group" = all ] || [ "$g" = "$group" ] || continue
  i=$((i + 1))
  tile=$(printf '%s/%03d' "$work" "$i")
  if [ -n "$model" ]; then
    "$tessera" generate --model "$model" --prompt "$prompt" -o "$tile.obj" >/dev/null 2>&1
  else
    "$tessera" generate --prompt "$prompt" -o "$tile.obj" >/dev/null 2>&1
  fi
  "$tessera" render "$tile.obj" --turntable "$tile.png" --size 192x192 --pitch 20 >/dev/null 2>&1
  printf '%s\n' "$prompt" > "$tile.label"
done
set --
for png in "$work"/*.png; do
  set -- "$@" -label "$(cat "${png%.png}.label")" "$png"
done
# ImageMagick's default font (Helvetica) is often not installed: use the system's sans font file.
font=$(fc-match -f '%{file}' sans 2>/dev/null || true)
[ -n "$font" ] && set -- -font "$font" "$@"
montage "$@" -tile 5x -geometry +2+2 -background '#202226' -fill white -pointsize 14 "$out"
echo "wrote $out ($(ls "$work"/*.png | wc -l) prompts, group $group)"
