// model/grad_sink.h: where backward writes gradients, and how it says they are done.
//
// A strategy supplies the sink (zero/): DDP and ZeRO-1 keep one full gradient buffer in
// padded bucket coordinates (PaddedGradBuffer) and start a bucket's collective when
// backward reports it finished; ZeRO-2 hands out staging buckets instead. FullGradSink,
// the plain unpadded buffer below, is for single-model tools without a strategy
// (`ringzero verify`, `bench-step`, the model tests). Gradients are stored in the model's precision (float
// in fp32 mode, bf16 in bf16 mode) and backward accumulates into them (+=).
#pragma once

#include <cstddef>

#include "base/memory.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/layout.h"

namespace rz {

class GradSink {
 public:
  virtual ~GradSink() = default;

  // Once at the start of each backward (each micro-step).
  virtual void begin_backward() {}

  // Storage for the gradients of layout range [offset, offset + count), which lies inside
  // one parameter tensor. Backward adds into it; the first request of a range within a
  // step's accumulation window sees what the sink decides (zeros for a fresh bucket, the
  // accumulated sum for a full buffer).
  virtual void* grad_ptr(size_t offset, size_t count) = 0;

  // Gradients of layout range [begin, end) are final for this backward. Called in layout
  // order with consecutive ranges that cover [0, layout.total) exactly once per backward,
  // one (weight, bias) pair at a time, right after the op that finished it:
  // grad_ready_ranges(layout) in model/layout.h.
  virtual void grads_ready(size_t begin, size_t end) = 0;

  // Once at the end of each backward, after the last grads_ready.
  virtual void end_backward() {}
};

// The plain sink: one full gradient buffer (MemTag::grads) in the model's precision, on
// the backend's device (pass model.backend() for a model that is not on the CPU).
class FullGradSink : public GradSink {
 public:
  FullGradSink(size_t total, Precision precision, Backend& be = cpu_backend());
  void* grad_ptr(size_t offset, size_t count) override;
  void grads_ready(size_t begin, size_t end) override {}
  void zero();  // start a new accumulation window
  void get_f32(float* out) const;  // every gradient as fp32 on the host: (total)
  void* data() { return grads_.data(); }
  size_t total() const { return total_; }
  Precision precision() const { return precision_; }

 private:
  size_t total_;
  Precision precision_;
  Backend& be_;
  Buffer<unsigned char> grads_;
};

}  // namespace rz
