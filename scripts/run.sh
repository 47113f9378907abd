#!/usr/bin/env bash
# The README's main job: installs what is missing, builds Release, and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/ringzero comm-bench --op all_reduce --nproc 2 --transport shm --min-bytes 8 --max-bytes 64M --iters 20 --warmup 5
