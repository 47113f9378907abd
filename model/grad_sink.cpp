// model/grad_sink.cpp: the full-buffer gradient sink.
#include "model/grad_sink.h"

#include <cstring>

#include "base/check.h"

namespace rz {

FullGradSink::FullGradSink(size_t total, Precision precision)
    : total_(total), precision_(precision), grads_(MemTag::grads, total * precision_bytes(precision)) {}

void* FullGradSink::grad_ptr(size_t offset, size_t count) {
  RZ_CHECK(offset + count <= total_, "FullGradSink: range [%zu, %zu) past the %zu gradients",
           offset, offset + count, total_);
  return grads_.data() + offset * precision_bytes(precision_);
}

void FullGradSink::zero() {
  if (!grads_.empty()) std::memset(grads_.data(), 0, grads_.bytes());
}

}  // namespace rz
