#!/usr/bin/env bash
# Run HERE (the development machine, Debian 12 with apt): downloads the Debian packages that a
# CUDA-only build of the engine and its GPU tests needs (GUI off) into <repo>/.deps, for a GPU machine
# that has no apt and no internet; scripts/gpu-check.sh unpacks them there (dpkg -x into /tmp, never /).
# Carry `.deps` in the device `run` call (it is git-ignored). About 10 MB.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$REPO/.deps"
cd "$REPO/.deps"
rm -f ./*.deb
apt-get download nlohmann-json3-dev libcli11-dev libgtest-dev libopenblas-pthread-dev \
  libopenblas0-pthread libopenblas-dev libgfortran5 zlib1g-dev zlib1g
for f in *.deb; do g="$(echo "$f" | tr -c "A-Za-z0-9._\n-" "_")"; [[ "$f" != "$g" ]] && mv "$f" "$g"; done  # plain file names travel
ls -la "$REPO/.deps"
du -sh "$REPO/.deps"
