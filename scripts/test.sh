#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test; then
# one line saying which CPU matmul paths the run exercised (tests/test_cpu_paths.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
rc=0
# One test per core at a time: the tests that start ranks wait more than they compute,
# and the sanitizer stage below runs the same suite this way.
ctest --test-dir build -j "$(nproc)" --output-on-failure --timeout 900 || rc=$?
paths=$(sed -n 's/^cpu matmul path //p' build/Testing/Temporary/LastTest.log 2>/dev/null | paste -sd ';' | sed 's/;/; /g')
echo "ringzero: CPU matmul paths: ${paths:-none reported (test_cpu_path_* did not run)}"
[ "$rc" = 0 ] || exit "$rc"
# Sanitizers and fuzzing (issue 11): ASan+UBSan over the suite, TSan over the comm tests,
# then every fuzz target over its corpus and 10 s of fuzzing. RINGZERO_QUICK_TEST=1 skips them.
if [ "${RINGZERO_QUICK_TEST:-0}" != 1 ]; then
  bash scripts/sanitize.sh
  bash scripts/fuzz.sh "${RINGZERO_FUZZ_SECONDS:-10}"
fi
