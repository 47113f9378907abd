// zero/strategy.h: how gradients are synchronised and the optimizer is applied.
//
//   strategy  grads kept on a rank             optimizer state   collectives per step
//   ddp       full buffer                      full              AllReduce(avg) per bucket during backward
//   zero1     full buffer                      owned shard       ReduceScatter per bucket (last micro-step), AllGather params
//   zero2     staging buckets + owned shard    owned shard       ReduceScatter per bucket during backward, AllGather params
//
// The training loop drives every strategy the same way:
//   for micro in 0..accum-1:  model.forward(...); model.backward(strategy.begin_micro_step(micro, accum), 1/accum);
//                             strategy.end_micro_step();
//   stats = strategy.step(lr);   // waits for comm, clips, AdamW, all-gathers params
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt2.h"
#include "model/grad_sink.h"

namespace rz {

enum class StrategyKind : int { ddp, zero1, zero2 };
const char* strategy_name(StrategyKind k);
StrategyKind parse_strategy(const std::string& s);  // throws naming the value

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; matrices and embeddings only (ParamTensor::weight_decay)
};

struct StrategyOptions {
  StrategyKind kind = StrategyKind::ddp;
  double bucket_mb = 25.0;     // bucket capacity in MiB of gradients (PyTorch DDP's default)
  int buckets_in_flight = 2;   // zero2: size of the staging pool
  bool grad_shard_fp32 = false;  // zero2, bf16 mode: keep the owned gradient shard in fp32
                                 // (exact accumulation over micro-steps; 4/N instead of 2/N bytes/param)
  AdamWConfig adamw;
  float grad_clip = 1.0f;      // clip the global norm to this; <= 0 disables clipping
};

struct StepStats {
  float grad_norm = 0.0f;          // global L2 norm of the averaged gradient, before clipping
  uint64_t comm_bytes_sent = 0;    // this rank, this step, all collectives
  double comm_seconds = 0.0;       // time spent executing collectives
  double comm_overlapped = 0.0;    // fraction of the gradient-sync time hidden behind backward (0..1)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual StrategyKind kind() const = 0;

  // The sink backward writes into for micro-step `micro` of `accum` (0-based).
  virtual GradSink& begin_micro_step(int micro, int accum) = 0;
  // After backward returned.
  virtual void end_micro_step() = 0;
  // After the last micro-step: finish gradient sync, global-norm clip, AdamW (t += 1) on
  // what this rank owns, and bring every rank's model.params() up to date.
  virtual StepStats step(float lr) = 0;

  // --- optimizer state, for checkpoints (layout-independent, so a checkpoint written
  // with N ranks can be resumed with M: each rank saves what it owns, in flat-layout
  // coordinates without padding, and loading takes this rank's part of the full arrays).
  virtual std::vector<std::pair<size_t, size_t>> owned_ranges() const = 0;  // [begin, end) in the flat layout
  // fp32 master weights, AdamW m and v for owned_ranges(), concatenated in range order.
  virtual void get_optimizer_state(std::vector<float>& master, std::vector<float>& m,
                                   std::vector<float>& v) const = 0;
  // From full arrays of layout().total elements each; also sets the model's params from master.
  virtual void set_optimizer_state(const float* master_full, const float* m_full,
                                   const float* v_full, uint64_t step) = 0;
  virtual uint64_t optimizer_step() const = 0;  // AdamW's t: steps taken so far
};

std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts);

}  // namespace rz
