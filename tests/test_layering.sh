#!/usr/bin/env bash
# CTest: the repository keeps its module layering (scripts/check-layering.sh), and the
# check does catch a back-edge and a "../" include in a small tree made up here.
set -euo pipefail
root=$1
bash "$root/scripts/check-layering.sh" "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base" "$tmp/zero" "$tmp/model" "$tmp/comm" "$tmp/launch"
printf '#include "base/check.h"\n#include <vector>\n' >"$tmp/zero/ok.h"
printf '#pragma once\n#include "zero/strategy.h"\n' >"$tmp/base/bad.h"
printf '#include "../zero/strategy.h"\n' >"$tmp/model/sneaky.cpp"
printf '#include "comm/factory.h"\n' >"$tmp/launch/ok.cpp"
printf '#include "launch/launch.h"\n' >"$tmp/comm/up.cpp"
if out=$(bash "$root/scripts/check-layering.sh" "$tmp"); then
  echo "check-layering.sh passed a tree with back-edges" >&2
  exit 1
fi
grep -q 'base/bad.h:2: base includes "zero/strategy.h", but zero is not below base' <<<"$out"
grep -q 'model/sneaky.cpp:1: model includes "../zero/strategy.h"' <<<"$out"
grep -q 'comm/up.cpp:1: comm includes "launch/launch.h", but launch is not below comm' <<<"$out"
[ "$(wc -l <<<"$out")" -eq 3 ]
echo "layering: ok"
