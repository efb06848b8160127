#!/usr/bin/env bash
# Installs the Debian packages Tessera needs to build and test. Skips what is present.
# Usage: scripts/setup.sh [--no-gui]   (default: also Qt, ImGui, GLFW, EGL, Xvfb, Blender for the studio and its tests)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config zlib1g-dev libopenblas-dev
      nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
      clang clang-format clang-tidy libclang-rt-14-dev python3 python3-numpy python3-torch libopenblas0-pthread
      libmeshoptimizer-dev libstb-dev libssl-dev libcurl4-openssl-dev curl libsqlite3-dev libcpp-httplib-dev libassimp-dev libdraco-dev draco assimp-testmodels slurm-wlm munge lib3mf-dev libzip-dev)
if [[ "${1:-}" != "--no-gui" ]]; then
  pkgs+=(qt6-base-dev libqt6opengl6-dev libxkbcommon-dev qt6-qpa-plugins libimgui-dev libglfw3-dev libegl-dev libgl-dev libegl-mesa0
         libgl1-mesa-dri xvfb xauth xdotool imagemagick blender)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || true
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all packages present"
fi
