// zero/memory/formula.h: how many bytes of model states each strategy keeps on a rank.
//
// Model states = parameters + gradients + optimizer states (ZeRO paper, section 3.1).
// With P parameters, N ranks and AdamW:
//
//   bf16 mode (bf16 params and grads; fp32 master weights, m, v: 4+4+4 = 12 bytes)
//     ddp     2 + 2   + 12        = 16 bytes/param     (7B -> 112 GB, as in the seed article, docs/comm.md)
//     zero1   2 + 2   + 12/N
//     zero2   2 + 2/N + 12/N                           (the paper's Psi(2 + 14/N))
//     zero3   2/N + 2/N + 12/N  = 16/N                 (the paper's Psi(16/N)) + gathered units
//   fp32 mode (fp32 params ARE the master weights, so no separate copy: m, v = 8 bytes)
//     ddp     4 + 4   + 8         = 16 bytes/param
//     zero1   4 + 4   + 8/N
//     zero2   4 + 4/N + 8/N
//     zero3   4/N + 4/N + 8/N = 16/N                                              + gathered units
//
// zero3's working set on top of the 16/N: the gathered parameter units in flight
// (zero3_gather_pool(): two buffers of the largest layer plus the embedding unit, which
// the tied classifier keeps gathered through the forward), and zero2's staging buckets.
//
// ringzero's zero2 keeps its owned gradient shard in the model's precision, as the paper
// counts it (with StrategyOptions::grad_shard_fp32 in fp32: 4/N instead of 2/N in bf16
// mode, for exact accumulation over micro-steps); and it holds staging buckets for the
// gradients in flight: buckets-in-flight buffers sized like the largest buckets plus one
// reserved for the bucket holding wte (zero2_staging_pool()) (tied: its gradient is started by the classifier at the top
// of backward and finished by the embedding at the very end, so that bucket is staged for
// the whole backward). paper_formula() gives the paper's numbers; ringzero_formula() what
// ringzero allocates.
//
// A bf16 run that reduces its gradients in fp32 (--grad-reduce-dtype fp32) also holds the
// fp32 reduce buffers of zero/wide_reduce.h (MemTag::comm, every strategy): buckets in
// flight x the largest padded bucket x 4 bytes (ExactStateBytes::wide).
#pragma once

#include <cstddef>

#include "model/config.h"
#include "zero/buckets.h"
#include "zero/grad_sync.h"
#include "zero/param_store.h"
#include "zero/state_bytes.h"
#include "zero/strategy_options.h"

namespace rz {

// Bytes per parameter on one rank, by kind of state.
struct PerParamBytes {
  double params = 0, grads = 0, master = 0, adam_m = 0, adam_v = 0;
  double total() const { return params + grads + master + adam_m + adam_v; }
};

// The ZeRO paper's accounting (zero2 gradient shard in the model's precision).
PerParamBytes paper_formula(StrategyKind kind, Precision precision, int nranks);
// What ringzero allocates, ignoring padding and staging.
PerParamBytes ringzero_formula(StrategyKind kind, Precision precision, int nranks,
                               bool grad_shard_fp32 = false);

// Exact bytes ringzero allocates per tag on one rank for a bucket plan (padding included):
// ExactStateBytes (zero/state_bytes.h), each part's fields from that part's own rule.
// These are the numbers the measured report must equal.
// staging: zero2's pool for this plan (GradSync::staging_pool(), or zero2_staging_pool()
// for a strategy not built); ignored for ddp and zero1.
// gathered: zero3's working set (ParamStore::gather_pool() or zero3_gather_pool()); ignored
// for the others.
// wide: the fp32 reduce buffers (GradSync::wide_pool() or wide_reduce_pool()); empty unless
// a bf16 run reduces in fp32.
ExactStateBytes exact_state_bytes(const BucketPlan& plan, StrategyKind kind, Precision precision,
                                  const StagingPool& staging, bool grad_shard_fp32 = false,
                                  const GatherPool& gathered = {}, const WidePool& wide = {});

// What a strategy would allocate on one rank for a model shape, without building it: the
// plan it builds (zero3's cut at units), zero2's / zero3's staging pool, zero3's gathered
// units, each asked of the part that owns it (zero/staged_grads.h, zero/sharded_params.h). For estimators that loop over kStrategyKinds (`ringzero memory`, the planner).
ExactStateBytes predicted_state_bytes(const ParamLayout& layout, int num_layers, StrategyKind kind,
                                      Precision precision, int nranks, double bucket_mb, int buckets_in_flight,
                                      bool grad_shard_fp32 = false, StagingPool* pool_out = nullptr,
                                      bool grad_reduce_fp32 = false);
// The same for a plan already built (strategy_bucket_plan(layout, kind, ...)), for a caller
// that needs the plan itself too (plan_memory): the plan is then built once.
ExactStateBytes predicted_state_bytes(const BucketPlan& plan, const ParamLayout& layout, int num_layers,
                                      StrategyKind kind, Precision precision, int buckets_in_flight,
                                      bool grad_shard_fp32, StagingPool* pool_out, bool grad_reduce_fp32);


}  // namespace rz
