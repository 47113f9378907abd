#!/usr/bin/env bash
# scripts/fuzz.sh [seconds]: fuzzes every parser of outside bytes with libFuzzer.
#
# Builds fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer) into build-fuzz/,
# replays each target's seed corpus (fuzz/corpus/<target>/, in the repository), then fuzzes
# each target for [seconds] (default 60; 0: the corpus only). New inputs go to a scratch
# directory, not into the repository; a finding (crash, leak, timeout, an allocation over
# 512 MiB, memory over 2 GiB) is saved as build-fuzz/findings/<target>-* and fails the run.
# Reproduce one with: build-fuzz/<target> build-fuzz/findings/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets=(fuzz_token_shard fuzz_model_file fuzz_debug_state fuzz_tokenizer_bin fuzz_train_checkpoint
         fuzz_toml_config fuzz_gpt2_bpe fuzz_store_protocol fuzz_rank_settings fuzz_stop_notice
         fuzz_flight_record fuzz_safetensors fuzz_hf_config fuzz_hf_llama fuzz_eval_file fuzz_tfevents)
source scripts/ccache.sh
launcher=("${rz_ccache_launcher[@]}")
cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
cmake --build build-fuzz --parallel "$(nproc)"
mkdir -p build-fuzz/findings
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
limits=(-rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -artifact_prefix=build-fuzz/findings/)
total=0
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/${t#fuzz_}"
  n=$(find "$corpus" -type f | wc -l)
  total=$((total + n))
  # Replay: every seed (and every past finding kept as a seed) must pass.
  "build-fuzz/$t" "${limits[@]}" -runs=0 "$corpus" 2>"$scratch/$t.log" ||
    { tail -30 "$scratch/$t.log"; echo "fuzz: $t fails on its corpus ($corpus)"; exit 1; }
  if [ "$seconds" -gt 0 ]; then
    mkdir -p "$scratch/$t"
    "build-fuzz/$t" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 "$scratch/$t" "$corpus" \
      2>"$scratch/$t.log" || { tail -40 "$scratch/$t.log"; echo "fuzz: $t found a problem (saved in build-fuzz/findings)"; exit 1; }
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $t: $n seeds replayed, $runs inputs in ${seconds}s, no finding"
  else
    echo "fuzz: $t: $n seeds replayed, no finding"
  fi
done
echo "fuzz: ${#targets[@]} targets, $total seeds: all passed"
