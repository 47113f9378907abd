#!/usr/bin/env bash
# scripts/carry-deps.sh: copies the header-only build dependencies (Eigen, toml++,
# nlohmann-json, CLI11, Catch2) and OpenSSL's static libcrypto from this machine's Debian
# packages into .deps/usr (an ignored folder), so that scripts/device-check.sh can build
# ringzero on a GPU machine that has a compiler, CUDA and CMake but no package registry:
# configure with -DCMAKE_PREFIX_PATH=$PWD/.deps/usr. Each package's CMake config finds its
# headers relative to its own location, so the copy works from any path.
#
# Headers, CMake and pkg-config files and static libraries: Catch2's libCatch2WithMain.a
# (its CMake targets file insists that the file exists) and libssl-dev's libcrypto.a, which
# the device build links statically (device-check.sh: -DOPENSSL_USE_STATIC_LIBS=TRUE), so
# the store's HMAC needs no libcrypto on the device. No shared library: toml++ is used
# header-only (cmake/tomlplusplus.cmake; Debian's -dev package holds only a link to a
# shared library that lives in another package, so copying it carried a dangling link).
# The copy is checked: a link that points nowhere, or a shared library, stops the script.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libeigen3-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev catch2 libssl-dev)
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
# OpenSSL keeps two headers in the multiarch folder (/usr/include/x86_64-linux-gnu/openssl),
# which the compiler searches by default under /usr but not under .deps: beside the others.
for arch_dir in .deps/usr/include/*-linux-gnu*/openssl; do
  [ -d "$arch_dir" ] && cp -a "$arch_dir"/. .deps/usr/include/openssl/
done
dangling=$(find .deps -xtype l)
libraries=$(find .deps -name '*.so' -o -name '*.so.*')
if [ -n "$dangling$libraries" ]; then
  echo "carry-deps: .deps must hold headers and CMake files only; found:" $dangling $libraries >&2
  exit 1
fi
echo "carry-deps: $(du -sh .deps | cut -f1) in .deps (${packages[*]}): headers, CMake files and static libraries, no shared library"
