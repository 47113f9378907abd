#!/usr/bin/env bash
# The counts issue 41 (one placement, composed strategies, one rank setup) is judged by, each
# from the source alone: run it before and after a structural change and compare the lines.
#   bash bench/architecture_counts.sh
set -uo pipefail
cd "$(dirname "$0")/.."
src() { find base comm kernels model zero train cli data launch viz \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort; }
count() { printf '%-58s %s\n' "$1" "$2"; }

# 1. Where a rank's bytes live.
kind_re='DeviceKind::|is_cpu\(\)|\.kind [!=]=|sim_device|device_buffers|cuda_device'
lines=$(src | grep -v '^kernels/' | xargs grep -nE "$kind_re" | grep -vE '^\S*:[0-9]*:\s*(//|#include)')
count "device-kind lines outside kernels/ (lines files modules)" \
  "$(echo "$lines" | grep -c . ) $(echo "$lines" | cut -d: -f1 | sort -u | wc -l) $(echo "$lines" | cut -d/ -f1 | sort -u | wc -l)"
count "make_backend( calls outside kernels/ and tests/" \
  "$(src | grep -v '^kernels/' | xargs grep -n 'make_backend(' | grep -v '^\S*:[0-9]*:\s*//' | wc -l)"
count "CommOptions fields cuda_device/device_buffers/sim_device" \
  "$(grep -cE '^\s+(int|bool) (cuda_device|device_buffers|sim_device)\b' comm/options.h)"

# 2. Strategies.
count "strategy classes deriving from a strategy class" \
  "$(src | xargs grep -hE 'class \w+ (final )?: public \w*(Strategy|StrategyCore)\b' | grep -vc 'public Strategy\b')"
count "virtual functions in class Strategy" \
  "$(awk '/^class Strategy /,/^};/' zero/strategy.h | grep -c 'virtual ')"
count "files under zero/ (lines)" "$(ls zero/*.cpp zero/*.h | wc -l) ($(cat zero/*.cpp zero/*.h | wc -l))"

# 3. One rank setup.
count "files in cli/ and train/ that include the launcher" \
  "$(grep -l '#include "launch/launch.h"' cli/* train/* | wc -l)"
count "options cli/ declares itself (add_option/flag/number...)" "$(cat cli/*.cpp | grep -oE 'add_(option|flag|number|option_function)\b' | wc -l)"
count "keys taken from the settings table in cli/" \
  "$(( $(grep -ho 'add_setting_flags([^{]*{[^}]*}' cli/*.cpp | grep -o '"[a-z_0-9]*"' | wc -l) + $(grep -o 'add_setting_flag(' cli/*.cpp | wc -l) ))"
count "AdamW updates of its own in cli/cmd_bench_step.cpp" "$(grep -cE 'adamw_update|AdamWStep' cli/cmd_bench_step.cpp)"
count "lines rewriting --strategy in a child's argv (cli/)" "$(grep -v 'add_option' cli/*.cpp | grep -c '"--strategy"')"

# Function lengths (universal-ctags' end lines): the ten longest, and the median.
if command -v ctags >/dev/null; then
  src | grep -v '\.cuh\?$' | ctags -L - -x --kinds-c++=f --fields=+ne --_xformat='%N %F %n %{end}' 2>/dev/null |
    awk 'NF==4 && $4>$3 {print $4-$3+1, $2":"$1}' | sort -rn > /tmp/arch_counts_fn.$$
  count "functions, median length, longest" \
    "$(wc -l < /tmp/arch_counts_fn.$$) $(sort -n /tmp/arch_counts_fn.$$ | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}') $(head -1 /tmp/arch_counts_fn.$$ | cut -d' ' -f1)"
  echo "the ten longest functions:"; head -10 /tmp/arch_counts_fn.$$ | sed 's/^/  /'
  rm -f /tmp/arch_counts_fn.$$
fi
