#!/bin/bash
# docs/blender-addon.png: a running `tessera serve` (the embedded model), Blender 3.4 under Xvfb with
# the add-on, two variations of "a chair" generated, the sidebar's Tessera tab open.
#   tools/screenshots/blender_panel.sh [OUT.png]   (needs blender, xvfb-run, xdotool, a built tessera)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(realpath -m "${1:-$root/docs/blender-addon.png}")"
work="$(mktemp -d)"
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
"$root/build/app/cli/tessera" serve --port 0 --out "$work/out" > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do grep -q "listening on" "$work/serve.log" && break; sleep 0.1; done
url="$(grep -o 'http://[^ ]*' "$work/serve.log")"
cat > "$work/run.sh" <<INNER
#!/bin/bash
blender --factory-startup --python "$root/tools/screenshots/blender_panel.py" -- "$url" "$out" > "$work/blender.log" 2>&1 &
for i in \$(seq 1 100); do grep -q READY "$work/blender.log" && break; sleep 0.2; done
sleep 0.5
xdotool mousemove 200 650 click 1      # the splash screen away
sleep 0.5
xdotool mousemove 1143 204 click 1     # the sidebar's Tessera tab (1400x900 screen)
sleep 0.3
xdotool mousemove 700 450
wait
INNER
chmod +x "$work/run.sh"
xvfb-run -a -s "-screen 0 1400x900x24" "$work/run.sh"
echo "$out"
