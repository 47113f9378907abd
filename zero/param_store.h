// zero/param_store.h: the third axis of a strategy -- where a rank's parameters live.
//
//   replicated                  (ddp) the model's own full parameters; AdamW updates all of
//                               them in place on every rank, so nothing moves after the step
//   replicated, gathered after  (zero1, zero2) the model's full parameters; AdamW updates the
//   the step                    owned shard of each bucket in place, then publish()
//                               all-gathers every bucket in place, so each rank ends the
//                               step with the full, identical model
//   sharded, gathered per unit  (zero3, zero/sharded_params.h) only the owned shard; the
//                               model reads each unit through a ParamGate that all-gathers
//                               it right before use
//
// param(b, a) is where AdamW finds the parameter of layout element a (model precision).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "zero/checkpoint_state.h"
#include "zero/state_bytes.h"
#include "zero/strategy_context.h"

namespace rz {

enum class ParamStoreKind : int { replicated, gathered_after_step, sharded };
ParamStoreKind param_store_kind(const StrategyTraits& t);

// zero3's gathered-parameter working set (zero/sharded_params.h): `general` buffers (the unit
// in use and the one prefetched) sized like the largest layer unit (lnf shares them), plus
// one for the embedding unit (wpe, wte), all in the model's precision. Empty for the others.
inline constexpr int kUnitsInFlight = 2;
struct GatherPool {
  int general = 0;
  size_t general_elems = 0;    // each: the largest layer (or lnf) unit
  size_t embedding_elems = 0;  // wpe + wte
  size_t total_elems() const { return static_cast<size_t>(general) * general_elems + embedding_elems; }
};

// params and gathered of a store of this kind for a plan (gathered: the sharded kind's pool).
void param_store_bytes(ParamStoreKind kind, const BucketPlan& plan, Precision precision, const GatherPool& gathered,
                       ExactStateBytes& e);

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  virtual ParamStoreKind kind() const = 0;
  // Where the parameter of layout element a (in this rank's update range of bucket b) lives.
  virtual unsigned char* param(int b, size_t a) const = 0;
  // Before the step's AdamW (zero3: no gathered copy may outlive it).
  virtual void before_update() {}
  // After AdamW: make the updated parameters visible to every rank where they are replicated.
  virtual void publish() {}
  // Checkpoint loading: the parameters of layout elements [begin, begin + n) from fp32
  // (the part this rank holds).
  virtual void set_chunk_f32(size_t begin, const float* data, size_t n) = 0;
  // The layout ranges this rank holds parameters for.
  virtual std::vector<std::pair<size_t, size_t>> ranges() const = 0;
  // CheckpointState::visit_params_f32: collective where the parameters are sharded.
  virtual void visit_f32(const ParamChunkFn* fn) = 0;
  virtual GatherPool gather_pool() const { return {}; }
  void add_bytes(ExactStateBytes& e, const BucketPlan& plan, Precision precision) const {
    param_store_bytes(kind(), plan, precision, gather_pool(), e);
  }
};

// ddp, zero1, zero2: the model's own full parameters.
class ReplicatedParams final : public ParamStore {
 public:
  ReplicatedParams(StrategyContext& cx, bool gather_after_step) : cx_(cx), gather_after_step_(gather_after_step) {}
  ParamStoreKind kind() const override {
    return gather_after_step_ ? ParamStoreKind::gathered_after_step : ParamStoreKind::replicated;
  }
  unsigned char* param(int b, size_t a) const override;
  void publish() override;
  void set_chunk_f32(size_t begin, const float* data, size_t n) override { cx_.model.set_params_f32(begin, n, data); }
  std::vector<std::pair<size_t, size_t>> ranges() const override { return {{0, cx_.plan.total}}; }
  // Pointers into the model's parameters in fp32 on the host, else converted (or copied
  // from the device) a chunk at a time.
  void visit_f32(const ParamChunkFn* fn) override;

 private:
  StrategyContext& cx_;
  bool gather_after_step_;
};

}  // namespace rz
