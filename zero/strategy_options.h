// zero/strategy_options.h: the names and knobs of the strategies, as plain data.
//
// Kept apart from zero/strategy.h so that configuration code (train/config.h) can hold a
// StrategyKind and take its defaults from StrategyOptions without pulling in the model
// and the communicator. Each default below is the one home of that default: the trainer's
// config, `ringzero memory` and `bench-strategies` all start from StrategyOptions{}.
#pragma once

#include <string>
#include <vector>

namespace rz {

enum class StrategyKind : int { ddp, zero1, zero2, zero3 };
inline constexpr StrategyKind kStrategyKinds[] = {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2,
                                                  StrategyKind::zero3};
const char* strategy_name(StrategyKind k);
std::vector<std::string> strategy_names();  // of kStrategyKinds, in order
// Throws "strategy: expected one of ddp, zero1, zero2, zero3, found 'NAME'" (parse_enum's wording).
StrategyKind parse_strategy(const std::string& name);

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; matrices and embeddings only (ParamTensor::weight_decay)
};

struct StrategyOptions {
  StrategyKind kind = StrategyKind::ddp;
  double bucket_mb = 25.0;     // bucket capacity in MiB of gradients (PyTorch DDP's bucket_cap_mb)
  int buckets_in_flight = 2;   // zero2: staging buckets reduce-scattering at once (raised when too few; zero2.h)
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
