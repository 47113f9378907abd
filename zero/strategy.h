// zero/strategy.h: how gradients are synchronised and the optimizer is applied.
//
//   strategy  grads kept on a rank             optimizer state   collectives per step
//   ddp       full buffer                      full              AllReduce(avg) per bucket during backward
//   zero1     full buffer                      owned shard       ReduceScatter per bucket (last micro-step), AllGather params
//   zero2     staging buckets + owned shard    owned shard       ReduceScatter per bucket during backward, AllGather params
//   zero3     as zero2; params sharded too     owned shard       as zero2, but params AllGathered per layer before use
//                                                                 in forward and backward instead of after the step
//
// The training loop drives every strategy the same way:
//   for micro in 0..accum-1:  model.forward(...); model.backward(strategy.begin_micro_step(micro, accum), 1/accum);
//                             strategy.end_micro_step();
//   stats = strategy.step(lr);   // waits for comm, clips, AdamW, all-gathers params
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt2.h"
#include "model/grad_sink.h"
#include "zero/buckets.h"
#include "zero/strategy_options.h"
#include "zero/wide_reduce.h"

namespace rz {

// zero2's staging pool (zero2.h explains it): `general` buffers of general_elems each and
// one reserved buffer of reserved_elems for the last bucket, all in the model's precision.
// Empty for the strategies that keep a full gradient buffer instead.
struct StagingPool {
  int general = 0;                   // general buffers (K)
  std::vector<size_t> general_elems;  // (K) their sizes: the K largest buckets other than the last, padded, largest first
  size_t reserved_elems = 0;         // the last (wte's) bucket, padded
  size_t total_elems() const {
    size_t t = reserved_elems;
    for (size_t e : general_elems) t += e;
    return t;
  }
};

// The pool zero2 allocates for a plan when `requested` buffers in flight are asked for.
// The rule lives here once (zero2.cpp): Zero2Strategy allocates exactly this, and
// `ringzero memory`, which predicts strategies it never builds, asks the same function.
StagingPool zero2_staging_pool(const ParamLayout& layout, const BucketPlan& plan, int requested);

// The fewest general buffers zero2 can run with: one for every bucket that one backward
// unit (a (weight, bias) pair, grad_ready_ranges in model/layout.h) spans, since a unit's
// buckets are written before either is ready (the last bucket is excluded: it holds wte
// and has its own reserved buffer).
int min_buckets_in_flight(const ParamLayout& layout, const BucketPlan& plan);

// zero3's gathered-parameter working set (zero3.h): `general` buffers (the unit in use and
// the one prefetched) sized like the largest layer unit (lnf shares them), plus one for the
// embedding unit (wpe, wte), all in the model's precision. Empty for the other strategies.
inline constexpr int kUnitsInFlight = 2;
struct GatherPool {
  int general = 0;
  size_t general_elems = 0;    // each: the largest layer (or lnf) unit
  size_t embedding_elems = 0;  // wpe + wte
  size_t total_elems() const { return static_cast<size_t>(general) * general_elems + embedding_elems; }
};
GatherPool zero3_gather_pool(const ParamLayout& layout, int num_layers);

struct StepStats {
  float grad_norm = 0.0f;          // global L2 norm of the averaged gradient, before clipping
  uint64_t comm_bytes_sent = 0;    // this rank, this step, all collectives
  double comm_seconds = 0.0;       // time spent executing collectives
  double comm_overlapped = 0.0;    // fraction of the gradient-sync time hidden behind backward (0..1)
  double gather_hidden = 0.0;      // zero3: fraction of the parameter all-gather time hidden behind
                                   // forward and backward (0..1); 0 for the others
  bool skipped = false;            // the step gate refused the update (no AdamW, parameters unchanged)
};

// A hook of step(): called with the global gradient norm (the same on every rank) after the
// gradients are synchronised and before AdamW; false skips this step's update. The
// loss-spike guard (train/spike_guard.h) uses it; it may issue blocking collectives.
using StepGate = std::function<bool(double grad_norm)>;

// The optimizer-state arrays a checkpoint holds, in the order it holds them.
enum class StateArray : int { master = 0, m = 1, v = 2 };
using StateChunkFn = std::function<void(StateArray array, const float* data, size_t n)>;
using ParamChunkFn = std::function<void(size_t begin, const float* data, size_t n)>;

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual StrategyKind kind() const = 0;

  // The sink backward writes into for micro-step `micro` of `accum` (0-based).
  virtual GradSink& begin_micro_step(int micro, int accum) = 0;
  // After backward returned.
  virtual void end_micro_step() = 0;
  // After the last micro-step: finish gradient sync, global-norm clip, AdamW (t += 1) on
  // what this rank owns, and bring every rank's model.params() up to date. With a step gate
  // that refuses, only the first part: no AdamW, t unchanged, StepStats::skipped.
  virtual StepStats step(float lr) = 0;
  void set_step_gate(StepGate gate) { gate_ = std::move(gate); }

  // --- optimizer state and parameters, for checkpoints. Layout-independent, so a
  // checkpoint written with N ranks resumes with M: each rank saves what it owns, in
  // flat-layout coordinates without padding, and loading hands each rank only the ranges it
  // needs. Both directions go in chunks (each class's own .cpp, its "checkpoint state" part;
  // the shared helpers in strategy.cpp): a chunk points into the
  // strategy's own arrays where they are fp32 on the host, else into one scratch buffer of
  // at most state_chunk_elems() floats (MemTag::workspace); nothing full-size is made.
  virtual std::vector<std::pair<size_t, size_t>> owned_ranges() const = 0;  // [begin, end) in the flat layout
  // fp32 master weights, then AdamW m, then v, each over owned_ranges() in order, as
  // consecutive chunks: fn(array, data, n), valid only during the call.
  virtual void visit_optimizer_state(const StateChunkFn& fn) const = 0;
  // The same, concatenated into vectors (tests and tools; the checkpoint writer streams).
  void get_optimizer_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) const;
  // Loading. The layout ranges whose master values this rank needs: where it holds the
  // parameters (all of them for ddp, zero1, zero2; the owned shard for zero3).
  virtual std::vector<std::pair<size_t, size_t>> param_ranges() const = 0;
  // Master values of layout elements [begin, begin + n): the parameters there (rounded to
  // the model's precision) and, where this rank owns them, its master copy. Parts outside
  // param_ranges() are ignored.
  virtual void set_master_chunk(size_t begin, const float* data, size_t n) = 0;
  // AdamW m or v of [begin, begin + n); parts outside owned_ranges() are ignored.
  virtual void set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) = 0;
  virtual void set_optimizer_step(uint64_t step) = 0;
  virtual uint64_t optimizer_step() const = 0;  // AdamW's t: steps taken so far
  // The full parameters as fp32, as chunks fn(begin, data, n) covering [0, layout().total)
  // once each (not necessarily in layout order); fn may be null on a rank that does not
  // need them. Collective: every rank calls it (zero3 all-gathers them unit by unit; the
  // others read the model's own).
  virtual void visit_params_f32(const ParamChunkFn* fn) = 0;
  // The same into a full array (tests and tools); null on ranks that do not need it.
  void params_f32(float* out);
  // The most floats a checkpoint scratch buffer holds: one --bucket-mb of fp32, at least 16K.
  size_t state_chunk_elems() const;

  // --- what the strategy built, for reports (they ask; they never rebuild it).
  virtual const BucketPlan& bucket_plan() const = 0;
  virtual const StrategyOptions& options() const = 0;
  virtual StagingPool staging_pool() const { return {}; }
  virtual GatherPool gather_pool() const { return {}; }
  // --grad-reduce-dtype fp32 in bf16 mode: the fp32 reduce buffers (zero/wide_reduce.h); else empty.
  virtual WidePool wide_pool() const { return {}; }

 protected:
  StepGate gate_;  // empty: every update applies
};

std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts);

}  // namespace rz
