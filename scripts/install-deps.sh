#!/usr/bin/env bash
# Installs what ringzero needs to build, test and run its main job on Debian/Ubuntu.
# Only packages that are missing are installed; nothing is downloaded but Debian packages.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config
      libeigen3-dev catch2 libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
      libdnnl-dev fortunes gnuplot-nox clang libclang-rt-dev
      libssl-dev  # libcrypto: HMAC-SHA256 of the rendezvous handshake (comm/job_auth.cpp)
      openmpi-bin libopenmpi-dev)  # --comm mpi and its test (test_comm_mpi runs mpirun)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "ringzero: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
