// zero/strategy_context.h: what every part of a rank's strategy reads, built once.
//
// A strategy is three parts (zero/strategy.h): the gradient synchronisation
// (zero/grad_sync.h), the optimizer state (zero/optimizer_state.h) and the parameter store
// (zero/param_store.h). Each owns its buffers; all of them read the same model, backend,
// communicator and bucket plan, and all of them add to the same step's communication
// accounting (StepWindow). Those live here, in the strategy, and the parts hold a
// reference.
//
// Legend: N ranks, P = layout.total parameters, S_b = shard of bucket b (padded_b / N).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "base/memory.h"
#include "comm/communicator.h"
#include "model/gpt2.h"
#include "zero/buckets.h"
#include "zero/checkpoint_state.h"
#include "zero/host_collectives.h"
#include "zero/strategy_options.h"

namespace rz {

// The communication of one step: from micro-step 0 (or the forward's first gather, zero3)
// to the end of step(). The compute thread's blocked time on gradient collectives is
// "exposed"; overlapped = 1 - exposed / (time the gradient collectives ran).
struct StepWindow {
  bool open = false;
  CommStats start;                 // the communicator's counters when the window opened
  double exposed_s = 0.0;          // compute thread blocked on gradient collectives
  double gather_exposed_s = 0.0;   // compute thread blocked on parameter gathers (zero3)
  void begin(const Communicator& comm) {
    start = comm.stats();
    exposed_s = 0.0;
    gather_exposed_s = 0.0;
    open = true;
  }
};

struct StrategyContext {
  // The bucket plan is cut at units where `row` says so (or opts.buckets_per_unit).
  StrategyContext(GPT2& model, Communicator& comm, const StrategyOptions& opts, const StrategyTraits& row);

  GPT2& model;
  Backend& be;        // the model's: gradients, shards and optimizer state live on its device
  Communicator& comm;
  HostCollectives host_comm;  // comm for host values (the clip norm's partials)
  StrategyOptions opts;
  const ParamLayout& layout;
  Precision precision;
  DType grad_dtype;   // gradients in the model's precision
  size_t grad_bytes;  // bytes per gradient (and parameter) element
  int nranks, rank;
  BucketPlan plan;
  StepWindow window;

  // True where the strategy's arrays (and the model's) are host memory a chunk may point into.
  bool arrays_on_host() const;
  // The most floats a checkpoint scratch buffer holds: one --bucket-mb of fp32, at least 16K.
  size_t state_chunk_elems() const;
  // fn(array, ...) over n fp32 values in backend memory: the pointer itself on the host,
  // else copied to the host a chunk at a time through `scratch` (allocated on first use).
  void visit_stored_f32(StateArray array, const float* src, size_t n, const StateChunkFn& fn,
                        Buffer<float>& scratch) const;
  // `scratch` with room for n floats (MemTag::workspace), allocated unless it has them.
  static float* scratch_for(Buffer<float>& scratch, size_t n);
};

// The layout elements this rank owns, bucket by bucket (empty ones skipped).
std::vector<std::pair<size_t, size_t>> owned_layout_ranges(const BucketPlan& plan, int rank);

}  // namespace rz
