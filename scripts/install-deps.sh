#!/usr/bin/env bash
# Installs what ringzero needs to build, test and run its main job on Debian/Ubuntu: both
# README commands, their runtime tools included (gnuplot for `ringzero plot`, the fortunes
# data files for the main job's corpus, mpirun for test_comm_mpi, clang and its libFuzzer
# runtime for scripts/fuzz.sh). Only packages that are missing are installed; nothing is
# downloaded but the distribution's packages. Proven from nothing on a minimal Debian 12
# root (scripts/fresh-machine-check.sh); Ubuntu's names below are known, not tested here.
set -euo pipefail

# Each entry is one need: a package name, or alternatives "a|b|c" (the first one the
# archive has is installed; one already installed satisfies it). @CLANG@ is the major
# version of the archive's default clang (Ubuntu 22.04 ships the fuzzer runtime in
# libclang-common-14-dev and has no libclang-rt-dev).
pkgs=(build-essential cmake ninja-build pkg-config
      libeigen3-dev catch2 libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
      libssl-dev                                  # OpenSSL's libcrypto: HMAC of the rendezvous store
      libdnnl-dev                                 # oneDNN: bf16 matmuls (optional, found at configure)
      fortunes gnuplot-nox                        # the main job's corpus, `ringzero plot`
      clang "libclang-rt-dev|libclang-rt-@CLANG@-dev|libclang-common-@CLANG@-dev"  # scripts/fuzz.sh
      openmpi-bin libopenmpi-dev)                 # --comm mpi and its test (test_comm_mpi runs mpirun)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
available() { [ -n "$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v '(none)')" ]; }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
  command -v sudo >/dev/null 2>&1 || sudo_cmd=(install-deps-needs-root-or-sudo)
fi

missing=()
for need in "${pkgs[@]}"; do
  satisfied=0
  IFS='|' read -r -a alts <<<"$need"
  for p in "${alts[@]}"; do
    [[ $p == *@CLANG@* ]] && continue  # a versioned name is only known after apt-get update
    if installed "$p"; then satisfied=1; break; fi
  done
  [ $satisfied = 1 ] || missing+=("$need")
done
[ "${#missing[@]}" -gt 0 ] || exit 0
if [ "${sudo_cmd[*]}" = install-deps-needs-root-or-sudo ]; then
  echo "install-deps: missing ${missing[*]}, and installing needs root or sudo (neither is available here)" >&2
  exit 1
fi

"${sudo_cmd[@]}" apt-get update -qq
clang_major=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
chosen=()
for need in "${missing[@]}"; do
  pick=""
  IFS='|' read -r -a alts <<<"${need//@CLANG@/${clang_major:-none}}"
  for p in "${alts[@]}"; do
    if installed "$p"; then pick=installed; break; fi
    if available "$p"; then pick=$p; break; fi
  done
  if [ -z "$pick" ]; then
    echo "install-deps: none of '${need//@CLANG@/${clang_major:-?}}' is in this system's package archive" \
         "($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")); on Ubuntu enable 'universe' and retry" >&2
    exit 1
  fi
  [ "$pick" = installed ] || chosen+=("$pick")
done
[ "${#chosen[@]}" -gt 0 ] || exit 0
echo "ringzero: installing ${chosen[*]}"
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${chosen[@]}" >/dev/null
