#!/usr/bin/env bash
# Run HERE (the development machine, Debian 12 with apt): downloads the Debian packages that a
# CUDA-only build of the engine and its GPU tests needs (GUI off) into <repo>/.deps, for a GPU machine
# that has no apt and no internet; scripts/gpu-check.sh unpacks them there (dpkg -x into /tmp, never /).
# Carry `.deps` in the device `run` call (it is git-ignored). The packages are unpacked here and
# pruned (documentation, static libraries, binaries other than pkgconf) into one
# .deps/gpu-deps.tar.xz of a few MB: the device runner carries at most 64 MiB with the working tree.
#
# What the GUI-off build needs (CMakeLists.txt's REQUIRED packages and the optional ones it uses):
# zlib, OpenSSL (SHA-256), libcurl (model downloads), SQLite (the library), cpp-httplib + brotli
# (tessera serve), nlohmann-json, CLI11, OpenBLAS, stb (PNG), meshoptimizer (decimation), GoogleTest,
# and pkg-config itself (cpp-httplib is found through it): each with every library it loads, the
# whole dependency closure, less what every CUDA image already has (the C library and its headers,
# the compiler's runtime, the base system). Assimp, libdraco and lib3mf are left out: without them the
# build reads the native mesh formats only, which the GPU checks do not need.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$REPO/.deps"
cd "$REPO/.deps"
rm -f ./*.deb
wanted=(zlib1g-dev libssl-dev libcurl4-openssl-dev libsqlite3-dev libcpp-httplib-dev libbrotli-dev
        nlohmann-json3-dev libcli11-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas-dev
        libstb-dev libmeshoptimizer-dev libgtest-dev pkgconf)
# The base system and the toolchain of the image (mixing Debian's C library headers or runtime into
# an Ubuntu build would break it), and the OpenBLAS variants the pthread one makes unnecessary.
skip='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc.*|rpcsvc-proto|libgcc-s1|libstdc\+\+6|gcc-12-base|libgomp1|debconf|debconf-2\.0|dpkg|perl-base|tar|libselinux1|libpcre2-8-0|libzstd1|liblzma5|libbz2-1\.0|libmd0|libaudit1|libaudit-common|libcap-ng0|libcap2|libacl1|libattr1|libgmp10|libdb5\.3|libpam.*|libtinfo6|libuuid1|libblkid1|libmount1|libsystemd0|libudev1|liblz4-1|libgcrypt20|libgpg-error0|init-system-helpers|sensible-utils|adduser|passwd|login|libopenblas0-openmp|libopenblas0-serial|libopenblas-openmp-dev|libopenblas-serial-dev|libopenblas64.*)$'
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances --no-pre-depends "${wanted[@]}" 2>/dev/null |
          grep -E '^[a-z0-9]' | sort -u | grep -v -E "$skip")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# shellcheck disable=SC2086  # one word per package
apt-get download $closure >/dev/null
mkdir root
for deb in *.deb; do dpkg -x "$deb" root; done
ls ./*.deb | xargs -n1 basename > root/PACKAGES
rm -rf root/usr/share/doc root/usr/share/man root/usr/share/lintian root/usr/share/info \
  root/usr/share/locale root/usr/src
find root -name 'liblapack*' -delete  # BLAS only
find root -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
find root/usr/bin -type f ! -name pkgconf -delete 2>/dev/null || true
rm -f "$REPO/.deps/"*.deb "$REPO/.deps/gpu-deps.tar.xz"
tar -C root -cJf "$REPO/.deps/gpu-deps.tar.xz" .
echo "$(wc -l < root/PACKAGES) packages -> $REPO/.deps/gpu-deps.tar.xz ($(du -h "$REPO/.deps/gpu-deps.tar.xz" | cut -f1))"
