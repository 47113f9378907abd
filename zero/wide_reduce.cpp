// zero/wide_reduce.cpp: the fp32 reduce buffers of --grad-reduce-dtype fp32 (wide_reduce.h).
#include "zero/wide_reduce.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "base/clock.h"

namespace rz {

WidePool wide_reduce_pool(const BucketPlan& plan, int buckets_in_flight) {
  WidePool p;
  if (plan.buckets.empty()) return p;
  p.buffers = std::min(static_cast<int>(plan.buckets.size()), std::max(1, buckets_in_flight));
  p.elems = plan.max_padded;
  return p;
}

void WideReduceBuffers::allocate(const WidePool& pool, Backend& be) {
  be_ = &be;
  pool_ = pool;
  bufs_.resize(static_cast<size_t>(pool.buffers));
  marks_.assign(bufs_.size(), nullptr);
  for (int i = pool.buffers - 1; i >= 0; --i) {
    bufs_[static_cast<size_t>(i)].allocate(MemTag::comm, pool.elems, be.device());
    free_.push_back(i);
  }
}

int WideReduceBuffers::acquire(const std::vector<WorkHandle>& pending, double* waited_s) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (free_.empty()) {
    released_.wait_for(lock, std::chrono::milliseconds(20));
    if (!free_.empty()) break;
    // A failed collective never releases its buffer: surface its error instead of waiting.
    lock.unlock();
    bool any_running = false;
    for (const auto& w : pending) {
      if (w->done()) w->wait();
      else any_running = true;
    }
    lock.lock();
    RZ_CHECK(any_running || !free_.empty(),
             "fp32 gradient reduction: all %d reduce buffers are held but no collective is running",
             pool_.buffers);
  }
  const int i = free_.back();
  free_.pop_back();
  std::shared_ptr<void> mark = std::move(marks_[static_cast<size_t>(i)]);
  lock.unlock();
  be_->wait_for(mark);  // GPU: the last narrowing out of this buffer is done
  if (waited_s != nullptr) *waited_s += seconds_since(t0);
  return i;
}

void WideReduceBuffers::release(int i, std::shared_ptr<void> mark) {
  std::lock_guard<std::mutex> lock(mu_);
  marks_[static_cast<size_t>(i)] = std::move(mark);
  free_.push_back(i);
  released_.notify_all();
}

}  // namespace rz
