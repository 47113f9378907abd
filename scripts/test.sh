#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure --timeout 900
# Sanitizers and fuzzing (issue 11): ASan+UBSan over the suite, TSan over the comm tests,
# then every fuzz target over its corpus and 10 s of fuzzing. RINGZERO_QUICK_TEST=1 skips them.
if [ "${RINGZERO_QUICK_TEST:-0}" != 1 ]; then
  bash scripts/sanitize.sh
  bash scripts/fuzz.sh "${RINGZERO_FUZZ_SECONDS:-10}"
fi
