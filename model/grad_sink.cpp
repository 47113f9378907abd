// model/grad_sink.cpp: the full-buffer gradient sink.
#include "model/grad_sink.h"

#include <vector>

#include "base/check.h"

namespace rz {

FullGradSink::FullGradSink(size_t total, Precision precision, Backend& be)
    : total_(total),
      precision_(precision),
      be_(be),
      grads_(MemTag::grads, total * precision_bytes(precision), be.device()) {}

void* FullGradSink::grad_ptr(size_t offset, size_t count) {
  RZ_CHECK(offset + count <= total_, "FullGradSink: range [%zu, %zu) past the %zu gradients",
           offset, offset + count, total_);
  return grads_.data() + offset * precision_bytes(precision_);
}

void FullGradSink::get_f32(float* out) const {
  if (precision_ == Precision::fp32) {
    be_.copy_to_host(out, grads_.data(), total_ * sizeof(float));
    return;
  }
  std::vector<bf16> host(total_);
  be_.copy_to_host(host.data(), grads_.data(), total_ * sizeof(bf16));
  cpu_backend().bf16_to_f32(out, host.data(), total_);
}

void FullGradSink::zero() {
  if (!grads_.empty()) be_.zero(grads_.data(), grads_.bytes());
}

}  // namespace rz
