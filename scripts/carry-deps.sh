#!/usr/bin/env bash
# scripts/carry-deps.sh: copies the header-only build dependencies (Eigen, toml++,
# nlohmann-json, CLI11, Catch2) from this machine's Debian packages into .deps/usr (an
# ignored folder), keeping their CMake package files, so that scripts/device-check.sh can
# build ringzero on a GPU machine that has a compiler, CUDA and CMake but no package
# registry. Every package's CMake config finds its headers relative to its own location,
# so the copy works from any path: configure with -DCMAKE_PREFIX_PATH=$PWD/.deps/usr.
# toml++'s Debian package also ships a small shared library, copied along.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libeigen3-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev catch2)
rm -rf .deps
mkdir -p .deps
for pkg in "${packages[@]}"; do
  if ! dpkg -s "$pkg" >/dev/null 2>&1; then
    echo "carry-deps: Debian package $pkg is not installed here (bash scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
  # Files and symbolic links, headers and CMake/pkg-config files and libraries, no docs.
  dpkg -L "$pkg" | grep -E '^/usr/(include|lib|share/(cmake|eigen3|pkgconfig))/' | while read -r path; do
    if [ -f "$path" ] || [ -L "$path" ]; then
      mkdir -p ".deps$(dirname "$path")"
      cp -a "$path" ".deps$path"
    fi
  done
done
echo "carry-deps: $(du -sh .deps | cut -f1) in .deps (${packages[*]})"
