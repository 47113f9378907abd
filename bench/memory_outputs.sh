#!/usr/bin/env bash
# `ringzero memory` over a grid of shapes and options: its whole output, for a change that must
# leave it byte-identical (run with the old and the new binary, then cmp the two files).
#   bash bench/memory_outputs.sh build/ringzero > /tmp/memory-after.txt
rz=$1
set -e
for args in "" "--params 7e9" "--model d12" "--model d12 --precision bf16" "--model d24 --batch 8 --seq 1024 --recompute all" \
  "--model d12 --device cuda" "--model d12 --budget 80GB" "--model llama-d12" "--model smollm2-135m --precision bf16 --recompute all" \
  "--model d12 --strategy zero2 --buckets-in-flight 4 --bucket-mb 10" "--model d12 --attention flash --batch 4" \
  "--model llama-tiny --kv-heads 1 --classifier untied" "--model d36 --nranks 3 --nranks 16 --threads 4" "--model d12 --strategy zero3 --budget 24GiB"; do
  echo "=== memory $args"
  $rz memory $args 2>&1 || echo "exit $?"
done
