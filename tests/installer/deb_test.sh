#!/usr/bin/env bash
# Packages the build with CPack (.deb), unpacks it into a temporary root with `dpkg -x` (no root
# rights, nothing installed system-wide) and runs the unpacked binaries from there: `tessera --version`
# and, when the package carries the embedded model, a whole generation to an OBJ file.
#   tests/installer/deb_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/pkg/*.deb)
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb -f "$deb" Package Version Depends
dpkg -x "$deb" "$tmp/root"
bin="$tmp/root/usr/bin"
"$bin/tessera" --version
# The benchmarks are a developer tool: neither a binary of the package nor a command of tessera.
test ! -e "$bin/tessera-bench" || { echo "FAIL: the package ships tessera-bench"; exit 1; }
if "$bin/tessera" bench kernels --quick >/dev/null 2>&1; then echo "FAIL: tessera has a bench command"; exit 1; fi
share="$tmp/root/usr/share"
test -d "$share/tessera/assets/vocab/clip" || { echo "FAIL: assets missing from the package"; exit 1; }
# The Assimp reader (a child process of every mesh import) ships in libexec and is found from bin.
reader="$tmp/root/usr/libexec/tessera/tessera-mesh-reader"
if [[ -x "$reader" ]]; then
  formats=$(env -u TESSERA_MESH_READER "$bin/tessera" check --formats)
  grep -q "read through Assimp .*($reader)" <<<"$formats" ||
    { echo "FAIL: the unpacked tessera does not use the packaged reader: $formats"; exit 1; }
else
  echo "the package has no tessera-mesh-reader (built without Assimp): Assimp formats not checked"
fi
if [[ -x "$bin/tessera-studio" ]]; then
  for f in applications/tessera-studio.desktop metainfo/io.tessera.Studio.metainfo.xml \
           icons/hicolor/scalable/apps/io.tessera.Studio.svg; do
    test -s "$share/$f" || { echo "FAIL: $f missing from the package"; exit 1; }
  done
  grep -q '^Exec=tessera-studio' "$share/applications/tessera-studio.desktop"
  command -v desktop-file-validate >/dev/null && desktop-file-validate "$share/applications/tessera-studio.desktop"
  echo "studio, viewer, desktop entry, icon and AppStream metadata present"
fi
if [[ -f "$share/tessera/assets/models/tessera-tiny/shape_gpt.safetensors" ]]; then
  # The unpacked tessera finds its model through ../share/tessera/assets next to the executable.
  (cd "$tmp" && env -u TESSERA_ASSETS "$bin/tessera" generate --prompt "a torus" -o "$tmp/torus.obj")
  faces=$(grep -c '^f ' "$tmp/torus.obj")
  echo "generated torus.obj from the unpacked package: $faces faces"
  ((faces > 100)) || { echo "FAIL: too few faces"; exit 1; }
else
  echo "the package has no embedded tessera-tiny model: generation from the package not checked"
fi
echo "installer test passed"
