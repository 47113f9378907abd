#!/usr/bin/env bash
# scripts/carry-deps.sh: copies the header-only build dependencies (Eigen, toml++,
# nlohmann-json, CLI11, Catch2) from this machine's Debian packages into .deps/usr (an
# ignored folder), so that scripts/device-check.sh can build ringzero on a GPU machine
# that has a compiler, CUDA and CMake but no package registry: configure with
# -DCMAKE_PREFIX_PATH=$PWD/.deps/usr. Each package's CMake config finds its headers
# relative to its own location, so the copy works from any path.
#
# Headers, CMake and pkg-config files, and Catch2's static libCatch2WithMain.a (its CMake
# targets file insists that the file exists); no shared library: toml++ is used
# header-only (cmake/tomlplusplus.cmake; Debian's -dev package holds only a link to a
# shared library that lives in another package, so copying it carried a dangling link).
# The copy is checked: a link that points nowhere, or a shared library, stops the script.
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
  # No docs, no shared libraries, and not toml++'s CMake config (it imports the shared
  # library; ringzero defines its own header-only target).
  dpkg -L "$pkg" | grep -E '^/usr/(include/|lib/|share/(cmake|eigen3|pkgconfig)/)' |
    grep -vE '\.so(\.[0-9]+)*$|/cmake/tomlplusplus/|/pkgconfig/tomlplusplus\.pc$' | while read -r path; do
    if [ -f "$path" ] || [ -L "$path" ]; then
      mkdir -p ".deps$(dirname "$path")"
      cp -a "$path" ".deps$path"
    fi
  done
done
dangling=$(find .deps -xtype l)
libraries=$(find .deps -name '*.so' -o -name '*.so.*')
if [ -n "$dangling$libraries" ]; then
  echo "carry-deps: .deps must hold headers and CMake files only; found:" $dangling $libraries >&2
  exit 1
fi
echo "carry-deps: $(du -sh .deps | cut -f1) in .deps (${packages[*]}): headers and CMake files, no shared library"
