// zero/sharded_params.h: zero3's parameter store -- a rank keeps only its owned shard of
// the parameters (owned_numel elements in the model's precision, MemTag::params), and the
// model reads every parameter through this store's ParamGate (model/gpt2.h):
//
//   unit      a layer's 12 tensors, lnf, or the embeddings (wpe, wte) -- one contiguous
//             layout range each (param_unit_ranges in model/layout.h). zero3 cuts its
//             buckets at unit boundaries (build_bucket_plan cut_at_units), so a unit is a
//             run of whole buckets, and gathering a unit is one AllGather per bucket into
//             a unit buffer (every rank sends the owned shard AdamW just updated).
//   acquire   the model asks for unit u right before reading it and names the unit it will
//             want next; the store starts that one's AllGather on the comm thread at once
//             (prefetch, one unit ahead, like the staged reduce-scatters) and waits only for
//             u. The time it waits counts as exposed (StepStats::gather_hidden).
//   release   the unit buffer goes back to the pool ("freed": no allocation per use).
//
// Working set (the "gathered layers in flight"): kUnitsInFlight buffers sized like the
// largest layer (lnf shares them; an untied classifier's lmhead sits in lnf's unit, so with
// one the buffers are that unit's size) plus one buffer for the embeddings. The embeddings
// are the one unit held across a stretch of work: a tied wte is the classifier too, so the
// forward keeps the embedding unit from the token embedding at the start to the classifier
// at the end (untied: only around the token embedding); the backward gathers it again for
// a tied classifier only (the embedding backward needs no parameter values, only dwte). So
// every step gathers every parameter twice (forward and backward) and reduce-scatters every
// gradient once: 3 x (N-1)/N x P elements sent against ddp's 2 x (N-1)/N x P, the ZeRO
// paper's 1.5x. Nothing is gathered after the step.
#pragma once

#include <utility>
#include <vector>

#include "model/gpt2.h"
#include "zero/param_store.h"

namespace rz {

GatherPool zero3_gather_pool(const ParamLayout& layout, int num_layers);

class ShardedParams final : public ParamStore, public ParamGate {
 public:
  // Takes this rank's shard from the model's full parameters, then installs itself as the
  // model's gate, which releases the model's full parameter buffer.
  explicit ShardedParams(StrategyContext& cx);
  ~ShardedParams() override;  // detaches the model (which is then without parameters)

  ParamStoreKind kind() const override { return ParamStoreKind::sharded; }
  unsigned char* param(int b, size_t a) const override;
  void before_update() override;
  void set_chunk_f32(size_t begin, const float* data, size_t n) override;
  std::vector<std::pair<size_t, size_t>> ranges() const override { return owned_layout_ranges(cx_.plan, cx_.rank); }
  // Unit by unit through the gate's own buffers (collective: every rank gathers).
  void visit_f32(const ParamChunkFn* fn) override;
  GatherPool gather_pool() const override { return gather_pool_; }

  const void* acquire(int unit, int next) override;
  void release(int unit) override;

 private:
  struct Slot {
    Buffer<unsigned char> data;  // a unit's parameters, model precision, MemTag::params
    int unit = -1;               // the unit gathered (or gathering) into it; -1 free
    bool held = false;           // acquired and not yet released
    std::vector<WorkHandle> work;  // its AllGathers (one per bucket of the unit)
  };
  int slot_for(int unit);             // a slot to gather `unit` into, or -1 (none free)
  void start_gather(int unit, int slot);
  void drop(int slot);                // waits for its gathers and frees it

  StrategyContext& cx_;
  int num_units_ = 0;                                // L + 2
  std::vector<std::pair<size_t, size_t>> units_;     // param_unit_ranges
  std::vector<std::pair<int, int>> unit_buckets_;    // per unit: [first, last] bucket
  Buffer<unsigned char> owned_params_;               // (owned_numel) model precision, MemTag::params
  GatherPool gather_pool_;
  std::vector<Slot> slots_;       // [0, general) layers and lnf; [general] the embeddings
  std::vector<int> slot_of_unit_;  // per unit: its slot, or -1
};

}  // namespace rz
