#!/usr/bin/env bash
# Packs the Blender add-on (integrations/blender/tessera) into a zip that Blender's
# Preferences > Add-ons > Install... takes: scripts/blender-addon-zip.sh [OUT.zip]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${1:-$root/tessera-blender.zip}")"
cd "$root/integrations/blender"
rm -f "$out"
python3 -c "import sys, zipfile, pathlib
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:
    for p in sorted(pathlib.Path('tessera').rglob('*.py')):
        z.write(p)" "$out"
echo "$out"
