// zero/strategy_options.h: the names, traits and knobs of the strategies, as plain data.
//
// Kept apart from zero/strategy.h so that configuration code (train/config.h) can hold a
// StrategyKind and take its defaults from StrategyOptions without pulling in the model
// and the communicator. Each default below is the one home of that default: the trainer's
// config, `ringzero memory` and `bench-strategies` all start from StrategyOptions{}.
#pragma once

#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

namespace rz {

enum class StrategyKind : int { ddp, zero1, zero2, zero3 };
inline constexpr StrategyKind kStrategyKinds[] = {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2,
                                                  StrategyKind::zero3};

// What a strategy is, stated once: its name and what it shards, cuts, gathers and runs on.
// Code that treats strategies differently asks for the trait it means (strategy_traits(k)),
// never for a kind by name, so a new strategy is one row here plus its class.
struct StrategyTraits {
  StrategyKind kind;
  const char* name;                 // the --strategy / TOML spelling
  bool shards_optimizer;            // master weights, AdamW m and v: the owned shard only (and the
                                    // gradients are reduce-scattered to it, then the params all-gathered)
  bool shards_grads;                // no full gradient buffer: staging buckets in flight + the owned shard
  bool shards_params;               // parameters: the owned shard, all-gathered unit by unit before use
  bool cuts_buckets_at_units;       // buckets always end at unit boundaries (build_bucket_plan cut_at_units)
  bool forward_needs_collectives;   // forward issues collectives: every rank runs every forward together
  bool runs_on_gpu_ranks;           // built for GPU ranks too (else CPU ranks only)
  // After AdamW every rank all-gathers the updated shards into its full parameters, in place.
  constexpr bool gathers_params_after_step() const { return shards_optimizer && !shards_params; }
  // Gradients staged bucket by bucket (zero2, zero3): only these read buckets_in_flight.
  constexpr bool stages_grad_buckets() const { return shards_grads; }
};

// Columns: kind, name, shards_optimizer, shards_grads, shards_params, cuts_buckets_at_units,
// forward_needs_collectives, runs_on_gpu_ranks.
inline constexpr StrategyTraits kStrategyTraits[] = {
    {StrategyKind::ddp,   "ddp",   false, false, false, false, false, true},
    {StrategyKind::zero1, "zero1", true,  false, false, false, false, true},
    {StrategyKind::zero2, "zero2", true,  true,  false, false, false, true},
    {StrategyKind::zero3, "zero3", true,  true,  true,  true,  true,  false},  // parameter gate is host code
};
static_assert(std::size(kStrategyTraits) == std::size(kStrategyKinds));
constexpr bool strategy_rows_in_order() {
  for (size_t i = 0; i < std::size(kStrategyKinds); ++i)
    if (kStrategyTraits[i].kind != kStrategyKinds[i] || static_cast<size_t>(kStrategyKinds[i]) != i) return false;
  return true;
}
static_assert(strategy_rows_in_order(), "kStrategyTraits: one row per StrategyKind, in the enum's order");

inline const StrategyTraits& strategy_traits(StrategyKind k) { return kStrategyTraits[static_cast<int>(k)]; }
inline const char* strategy_name(StrategyKind k) { return strategy_traits(k).name; }
std::vector<std::string> strategy_names();  // of kStrategyKinds, in order
// Throws "strategy: expected one of ddp, zero1, zero2, zero3, found 'NAME'" (parse_enum's wording).
StrategyKind parse_strategy(const std::string& name);
// Refuses a strategy that does not run on GPU ranks where `on_gpu`: throws
// "WHERE: zero3 runs on CPU ranks only in this build (GPU ranks: ddp, zero1 or zero2)".
void check_strategy_device(StrategyKind k, bool on_gpu, const std::string& where);

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; matrices and embeddings only (ParamTensor::weight_decay)
};

struct StrategyOptions {
  StrategyKind kind = StrategyKind::ddp;
  double bucket_mb = 25.0;     // bucket capacity in MiB of gradients (PyTorch DDP's bucket_cap_mb)
  int buckets_in_flight = 2;   // zero2: staging buckets reduce-scattering at once (raised when too few; staged_grads.h)
  bool grad_shard_fp32 = false;  // zero2, bf16 mode: keep the owned gradient shard in fp32
                                 // (exact accumulation over micro-steps; 4/N instead of 2/N bytes/param)
  bool grad_reduce_fp32 = false;  // bf16 mode: gradient buckets travel and are summed in fp32
                                  // (--grad-reduce-dtype fp32; zero/wide_reduce.h)
  bool buckets_per_unit = false;  // cut buckets at ZeRO-3's unit boundaries too (zero3 always
                                  // does; the others on request, to compare on zero3's buckets)
  AdamWConfig adamw;
  float grad_clip = 1.0f;      // clip the global norm to this; <= 0 disables clipping
};

}  // namespace rz
