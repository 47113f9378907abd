// zero/strategy_core.h: what ddp, zero1 and zero2 share.
//
// StrategyCore is both the Strategy the trainer drives and the GradSink backward writes
// into. It builds the bucket plan, follows grads_ready to know when a bucket is complete
// (ranges arrive in layout order, so one cursor suffices) and hands each complete bucket
// to the subclass's submit_bucket() -- on the last micro-step only, unless the subclass
// communicates on every micro-step (zero2). It also keeps the per-step communication
// accounting: bytes and seconds from the communicator's counters, and the "exposed" time
// the compute thread spent blocked on gradient collectives, from which the overlapped
// fraction follows: overlapped = 1 - exposed / (time the gradient collectives ran).
//
// Legend: N ranks, P = layout.total parameters, S_b = shard of bucket b (padded_b / N).
#pragma once

#include <cstddef>
#include <vector>

#include "base/clock.h"
#include "base/memory.h"
#include "base/trace.h"
#include "comm/debug/flight_recorder.h"
#include "zero/buckets.h"
#include "zero/host_collectives.h"
#include "zero/strategy.h"
#include "zero/wide_reduce.h"

namespace rz {

class StrategyCore : public Strategy, public GradSink {
 public:
  StrategyCore(GPT2& model, Communicator& comm, const StrategyOptions& opts);

  GradSink& begin_micro_step(int micro, int accum) override;
  void end_micro_step() override;
  void grads_ready(size_t begin, size_t end) override;
  uint64_t optimizer_step() const override { return t_; }
  void set_optimizer_step(uint64_t step) override { t_ = step; }
  // The model's own parameters: pointers into them in fp32 on the host, else converted (or
  // copied from the device) a chunk at a time (strategy.cpp).
  void visit_params_f32(const ParamChunkFn* fn) override;

  const BucketPlan& bucket_plan() const override { return plan_; }
  WidePool wide_pool() const override { return wide_.pool(); }
  const StrategyOptions& options() const override { return opts_; }

 protected:
  // Called when bucket b's gradients are final for this backward (and communication is due).
  virtual void submit_bucket(int b) = 0;
  // submit_bucket(b) with its collectives labelled "bucket b" on the trace's comm track.
  void submit_bucket_labelled(int b) {
    trace::BucketLabel label(b);
    CommPurpose purpose("gradients");  // the flight recorder's label (comm/debug/flight_recorder.h)
    submit_bucket(b);
  }
  // Called at micro-step 0, before backward: start a new accumulation window.
  virtual void begin_window() = 0;
  // Called at every micro-step, after begin_window() on micro-step 0.
  virtual void begin_micro() {}
  // zero2 reduce-scatters on every micro-step; ddp and zero1 only on the last one.
  virtual bool communicates_every_micro_step() const { return false; }

  // Starts the window whose communication the next StepStats report: at micro-step 0, or
  // earlier when the strategy communicates before backward (zero3's forward gathers).
  void open_window();
  // Waits on every pending gradient collective; the blocked time counts as exposed.
  void wait_grad_work();
  // Fills comm bytes/seconds/overlap for the window that ends now.
  StepStats finish_stats(double grad_norm);
  // True when the step gate refuses this step's update (step() then returns skipped_stats()).
  bool gate_refuses(double grad_norm) const { return gate_ && !gate_(grad_norm); }
  StepStats skipped_stats(double grad_norm) {
    StepStats s = finish_stats(grad_norm);
    s.skipped = true;
    return s;
  }

  // One AdamW update (t_ already incremented) of layout elements [lo, hi) of bucket b, one
  // backend call (one launch on a GPU) for all the tensors in it: master (n, fp32; null in
  // fp32 mode, where param is the master), param (n, model precision), grad (n,
  // grad_dtype), m, v (n, fp32), n = hi - lo. Weight decay follows each tensor's flag.
  void adamw(int b, size_t lo, size_t hi, float* master, void* param, const void* grad, DType grad_dtype, float* m,
             float* v, float lr, float grad_scale) const;
  // fn(array, ...) over n fp32 values in backend memory: the pointer itself on the host,
  // else copied to the host a chunk at a time through `scratch` (allocated on first use).
  void visit_stored_f32(StateArray array, const float* src, size_t n, const StateChunkFn& fn,
                        Buffer<float>& scratch) const;
  // `scratch` with room for n floats (MemTag::workspace), allocated unless it has them.
  static float* scratch_for(Buffer<float>& scratch, size_t n);

  // --grad-reduce-dtype fp32 (zero/wide_reduce.h): widens bucket b's bf16 gradients `grads`
  // (padded elements) into a free fp32 buffer and returns its index; *wide is the buffer.
  int widen_bucket(int b, const void* grads, float** wide);

  GPT2& model_;
  Backend& be_;        // the model's: gradients, shards and optimizer state live on its device
  Communicator& comm_;
  HostCollectives host_comm_;  // comm_ for host values (the clip norm's partials)
  StrategyOptions opts_;
  const ParamLayout& layout_;
  Precision precision_;
  DType grad_dtype_;  // gradients in the model's precision
  size_t grad_bytes_;  // bytes per gradient element
  int nranks_, rank_;
  BucketPlan plan_;

  int micro_ = 0, accum_ = 1;
  size_t ready_upto_ = 0;   // grads_ready has covered [0, ready_upto_) in this backward
  int next_bucket_ = 0;     // first bucket not yet complete in this backward
  uint64_t t_ = 0;
  std::vector<WorkHandle> grad_work_;
  double exposed_s_ = 0.0;  // compute thread blocked on gradient collectives, this window
  double gather_exposed_s_ = 0.0;  // zero3: compute thread blocked on parameter gathers, this window
  bool window_open_ = false;
  CommStats window_start_stats_;
  DType reduce_dtype_;        // what gradient collectives carry: grad_dtype_, or f32 (grad_reduce_fp32)
  WideReduceBuffers wide_;    // the fp32 buffers when reduce_dtype_ != grad_dtype_
};

// The layout elements this rank owns, bucket by bucket (empty ones skipped): owned_ranges().
std::vector<std::pair<size_t, size_t>> owned_layout_ranges(const BucketPlan& plan, int rank);

}  // namespace rz
