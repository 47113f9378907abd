// zero/memory/plan.h: the peak bytes one rank holds during training, before running it.
//
// `ringzero memory --model ...` (cli/cmd_memory.cpp) answers "does it fit?" with the same
// allocation rules the trainer follows, each from its owner:
//   model states   zero/memory/formula.h's predicted_state_bytes (parameters, gradient buffer
//                  or owned shard, master/m/v, zero2's / zero3's staging pool, zero3's
//                  gathered units), for the bucket plan the strategy would build;
//   activations    GPT2::activation_bytes for (B, T) and the recompute mode (logits included);
//   working        what the step allocates besides: the ring's chunk-sized reduce buffer
//                  (ReduceScatter of the largest bucket, sharded strategies; in the dtype the
//                  buckets travel in), and on CPU ranks
//                  the kernels' per-thread fp32 scratch (bf16 matmuls, attention heads);
//   start-up       zero3: the model's full parameter buffer, until the strategy takes its
//                  shard over, next to everything zero3 keeps (its states, owned parameter
//                  shard and gathered units are allocated by then; the strategies' own
//                  start-up goes bucket by bucket).
// peak() = max(states + activations + working, start-up). The planner test
// (tests/test_train_memory_plan.cpp) holds it to the tracker's measured peak of a real step.
// Strategies come from kStrategyKinds and predicted_state_bytes, which asks each part of a
// strategy (gradient sync, optimizer state, parameter store) for its bytes: a new row there appears
// in the planner without edits here.
#pragma once

#include <cstddef>

#include "model/config.h"
#include "zero/memory/formula.h"
#include "zero/strategy_options.h"

namespace rz {

struct MemoryPlanInput {
  GPT2Config cfg;         // finalized
  Precision precision = Precision::bf16;
  Recompute recompute = Recompute::none;
  Attention attention = Attention::materialized;
  StrategyKind kind = StrategyKind::ddp;
  int nranks = 1;
  int batch = 1;          // B, the micro-batch per rank
  int seq = 0;            // T (0: cfg.max_seq_len)
  double bucket_mb = StrategyOptions{}.bucket_mb;
  int buckets_in_flight = StrategyOptions{}.buckets_in_flight;
  bool grad_shard_fp32 = false;
  bool grad_reduce_fp32 = false;  // bf16: buckets reduced in fp32 (--grad-reduce-dtype fp32)
  bool cpu = true;        // CPU ranks: count the CPU kernels' scratch
  int threads = 1;        // OpenMP threads per rank (attention scratch is per thread)
};

struct MemoryPlan {
  ExactStateBytes states;     // per tag; states.staging is zero2's pool (MemTag::comm)
  size_t activations = 0;     // MemTag::activations
  size_t ring_work = 0;       // MemTag::comm: the ring's reduce buffer
  size_t kernel_scratch = 0;  // MemTag::workspace during the step
  size_t startup = 0;         // peak while the strategy is built
  size_t working() const { return ring_work + kernel_scratch; }
  size_t step() const { return states.total() + activations + working(); }
  size_t peak() const { return step() > startup ? step() : startup; }
};

MemoryPlan plan_memory(const MemoryPlanInput& in);

// Refuses, before anything is allocated, what cannot fit in this machine's memory: the
// planned peak of `in` times ranks_here (the ranks sharing this machine), plus extra_bytes
// (what the caller allocates besides the step), against available_host_memory()
// (base/host_memory.h: MemAvailable or the cgroup limit, whichever is smaller). Throws one
// line: "WHAT: planned X per rank (model states, activations, working) x N ranks, but only
// Y is available (SOURCE); HINT". A shape whose bytes a 64-bit count could not hold is
// measured by an upper estimate in doubles instead. Nothing is refused when the machine's
// figure cannot be read.
void check_fits_host_memory(const MemoryPlanInput& in, int ranks_here, double extra_bytes, const char* what,
                            const char* hint);

// The largest micro-batch B whose peak() fits in budget bytes (0 when even B = 1 does
// not), searched up to max_batch.
int largest_batch(MemoryPlanInput in, double budget, int max_batch = 1 << 20);

}  // namespace rz
