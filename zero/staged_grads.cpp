// zero/staged_grads.cpp: the staging pool's rule, and zero2's / zero3's gradient sync over it.
#include "zero/staged_grads.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/bf16.h"
#include "base/check.h"
#include "base/clock.h"

namespace rz {

int min_buckets_in_flight(const ParamLayout& layout, const BucketPlan& plan) {
  // While backward writes one unit (grad_ready_ranges), every unit before it is reported
  // ready, so the only buckets it can hold open are the ones that unit touches.
  const int last = static_cast<int>(plan.buckets.size()) - 1;
  int need = 1;
  for (auto [begin, end] : grad_ready_ranges(layout)) {
    int b0 = plan.bucket_of(begin);
    int b1 = plan.bucket_of(end - 1);
    need = std::max(need, std::min(b1, last - 1) - b0 + 1);  // general-pool buckets only
  }
  return need;
}

StagingPool zero2_staging_pool(const ParamLayout& layout, const BucketPlan& plan, int requested) {
  StagingPool pool;
  if (plan.buckets.empty()) return pool;
  // Each buffer holds one bucket (padded): the reduce-scatter is in place.
  pool.reserved_elems = plan.buckets.back().padded;
  const int others = static_cast<int>(plan.buckets.size()) - 1;
  if (others == 0) return pool;  // the reserved buffer holds the whole model
  // Never more general buffers than there are buckets to stage in them, and each sized
  // like one of the largest buckets: a bucket takes the smallest free buffer that holds
  // it. So the pool never holds more than the gradients it stages (zero2 <= zero1), and
  // the two buckets one backward unit can hold open always fit at once (the larger one
  // in the largest buffer).
  pool.general = std::min(others, std::max(requested, min_buckets_in_flight(layout, plan)));
  for (int b = 0; b < others; ++b) pool.general_elems.push_back(plan.buckets[b].padded);
  std::sort(pool.general_elems.begin(), pool.general_elems.end(), std::greater<size_t>());
  pool.general_elems.resize(pool.general);
  return pool;
}

StagedGrads::StagedGrads(StrategyContext& cx) : GradSync(cx) {
  pool_ = zero2_staging_pool(cx.layout, cx.plan, cx.opts.buckets_in_flight);
  pool_size_ = pool_.general;
  const Device dev = cx.model.device();
  staging_.resize(pool_size_ + 1);
  for (int s = 0; s < pool_size_; ++s) staging_[s].allocate(MemTag::comm, pool_.general_elems[s] * cx.grad_bytes, dev);
  staging_[pool_size_].allocate(MemTag::comm, pool_.reserved_elems * cx.grad_bytes, dev);
  busy_.assign(pool_size_ + 1, false);
  sent_.assign(pool_size_ + 1, false);
  read_.assign(pool_size_ + 1, nullptr);
  for (int s = pool_size_ - 1; s >= 0; --s) free_.push_back(s);
  slot_of_.assign(cx.plan.buckets.size(), -1);
  owned_dtype_ = cx.opts.grad_shard_fp32 ? DType::f32 : cx.grad_dtype;
  owned_grads_.allocate(MemTag::grads, cx.plan.owned_numel() * dtype_size(owned_dtype_), dev);
}

size_t StagedGrads::staging_bytes() const {
  size_t total = 0;
  for (const auto& s : staging_) total += s.bytes();
  return total;
}

void StagedGrads::begin_micro() { std::fill(slot_of_.begin(), slot_of_.end(), -1); }

int StagedGrads::acquire_slot(int b) {
  const bool reserved = b == static_cast<int>(cx_.plan.buckets.size()) - 1;
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  const size_t need = cx_.plan.buckets[b].padded;
  // Best fit: the smallest free general buffer that holds the bucket (free_ position), or -1.
  auto best_fit = [&] {
    int best = -1;
    for (int i = 0; i < static_cast<int>(free_.size()); ++i)
      if (pool_.general_elems[free_[i]] >= need && (best < 0 || pool_.general_elems[free_[i]] < pool_.general_elems[free_[best]]))
        best = i;
    return best;
  };
  auto available = [&] { return reserved ? !busy_[pool_size_] : best_fit() >= 0; };
  while (!available()) {
    // Waiting only makes sense for buffers that fit and whose reduce-scatter is queued: the
    // comm thread will release them. Otherwise every such buffer belongs to a bucket that
    // backward has not finished yet, and waiting would never end.
    bool any_sent = reserved ? static_cast<bool>(sent_[pool_size_]) : false;
    for (int s = 0; !reserved && s < pool_size_; ++s) any_sent = any_sent || (sent_[s] && pool_.general_elems[s] >= need);
    RZ_CHECK(any_sent,
             "zero2: all %d staging buckets hold unfinished gradients when bucket %d needs one; "
             "raise the number of buckets in flight",
             pool_size_, b);
    released_.wait_for(lock, std::chrono::milliseconds(20));
    if (available()) break;
    // A failed collective never releases its buffer: surface its error instead of waiting.
    lock.unlock();
    for (auto& w : work_)
      if (w->done()) w->wait();
    lock.lock();
  }
  int slot = pool_size_;
  if (!reserved) {
    const int i = best_fit();
    slot = free_[i];
    free_.erase(free_.begin() + i);
  }
  busy_[slot] = true;
  sent_[slot] = false;
  std::shared_ptr<void> read = std::move(read_[slot]);
  lock.unlock();
  cx_.window.exposed_s += seconds_since(t0);
  cx_.be.wait_for(read);  // GPU: the last reduce-scatter and accumulate from this buffer are done
  cx_.be.zero(slot_data(slot), cx_.plan.buckets[b].padded * cx_.grad_bytes);
  return slot;
}

void StagedGrads::release_slot(int slot, std::shared_ptr<void> read) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_[slot] = false;
  sent_[slot] = false;
  read_[slot] = std::move(read);
  if (slot < pool_size_) free_.push_back(slot);
  released_.notify_all();
}

void* StagedGrads::grad_ptr(size_t offset, size_t count) {
  RZ_CHECK(count > 0 && offset + count <= cx_.plan.total, "grad_ptr: range [%zu, +%zu) outside %zu",
           offset, count, cx_.plan.total);
  const int b = cx_.plan.bucket_of(offset);
  const Bucket& bk = cx_.plan.buckets[b];
  RZ_CHECK(offset + count <= bk.end, "grad_ptr: range [%zu, +%zu) crosses bucket %d's end %zu",
           offset, count, b, bk.end);
  RZ_CHECK(slot_of_[b] != -2, "grad_ptr: bucket %d was already reported ready in this backward", b);
  if (slot_of_[b] < 0) slot_of_[b] = acquire_slot(b);
  return slot_data(slot_of_[b]) + (offset - bk.begin) * cx_.grad_bytes;
}

void StagedGrads::submit_bucket(int b, int micro) {
  if (slot_of_[b] < 0) slot_of_[b] = acquire_slot(b);  // no gradient written: send zeros
  const int slot = slot_of_[b];
  slot_of_[b] = -2;
  const Bucket& bk = cx_.plan.buckets[b];
  unsigned char* in = slot_data(slot);
  // In place: the reduced shard replaces this rank's own chunk of the bucket.
  unsigned char* shard = in + static_cast<size_t>(cx_.rank) * bk.shard * cx_.grad_bytes;
  unsigned char* owned = owned_grads_.data() + cx_.plan.owned_offset(b) * dtype_size(owned_dtype_);
  const bool first = micro == 0;
  const DType dt = cx_.grad_dtype, odt = owned_dtype_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sent_[slot] = true;
  }
  if (wide_.enabled()) return submit_wide(b, slot, owned, first);
  // Folds the reduced shard into the owned gradient (copy on the first micro-step, so a
  // single micro-step is bit-exact), then gives the buffer back. The stream form
  // (comm/communicator.h): with the nccl backend it runs as soon as the reduce-scatter is
  // queued, and queues the fold on the comm stream right behind it; the buffer goes back
  // at once, with a mark that the next user's zeroing waits for on the compute stream
  // (acquire_slot). Elsewhere it runs on the comm thread after the reduce-scatter, with
  // stream null (the CPU: the fold is done when it returns; a mark is null).
  OnDone done = OnDone::on_stream([this, slot, shard, owned, n = bk.shard, first, dt, odt](void* stream) {
    Backend::StreamScope on(cx_.be, stream);
    if (odt == DType::bf16)
      cx_.be.accumulate_bf16(reinterpret_cast<bf16*>(owned), reinterpret_cast<const bf16*>(shard), n, first);
    else if (dt == DType::f32)
      cx_.be.accumulate_f32(reinterpret_cast<float*>(owned), reinterpret_cast<const float*>(shard), n, first);
    else
      cx_.be.accumulate_f32(reinterpret_cast<float*>(owned), reinterpret_cast<const bf16*>(shard), n, first);
    release_slot(slot, cx_.be.mark(stream));
  });
  work_.push_back(cx_.comm.reduce_scatter_async(in, shard, bk.padded, dt, ReduceOp::avg, done));
}

// --grad-reduce-dtype fp32 (zero/wide_reduce.h): the staging bucket is widened into an fp32
// buffer and reduce-scattered there in place; the fp32 shard is folded into the owned
// gradient (fp32: added exactly; bf16: rounded once, then added as the bf16 path adds, the
// staging buffer, no longer needed, holding the rounded shard), then both buffers go back.
void StagedGrads::submit_wide(int b, int slot, unsigned char* owned, bool first) {
  const Bucket& bk = cx_.plan.buckets[b];
  float* wide = nullptr;
  const int i = widen_bucket(b, slot_data(slot), &wide);
  float* shard = wide + static_cast<size_t>(cx_.rank) * bk.shard;
  bf16* narrow = reinterpret_cast<bf16*>(slot_data(slot));  // (shard) scratch once widened
  const DType odt = owned_dtype_;
  OnDone done = OnDone::on_stream([this, i, slot, shard, narrow, owned, n = bk.shard, first, odt](void* stream) {
    Backend::StreamScope on(cx_.be, stream);
    if (odt == DType::f32) {
      cx_.be.accumulate_f32(reinterpret_cast<float*>(owned), shard, n, first);
    } else if (first) {
      cx_.be.f32_to_bf16(reinterpret_cast<bf16*>(owned), shard, n);
    } else {
      cx_.be.f32_to_bf16(narrow, shard, n);
      cx_.be.accumulate_bf16(reinterpret_cast<bf16*>(owned), narrow, n, false);
    }
    std::shared_ptr<void> read = cx_.be.mark(stream);
    wide_.release(i, read);
    release_slot(slot, std::move(read));
  });
  work_.push_back(cx_.comm.reduce_scatter_async(wide, shard, bk.padded, DType::f32, ReduceOp::avg, done));
}

const void* StagedGrads::averaged(int b, size_t a) {
  const size_t shard_begin = cx_.plan.owned_layout_range(b, cx_.rank).first;
  return owned_grads_.data() + (cx_.plan.owned_offset(b) + (a - shard_begin)) * dtype_size(owned_dtype_);
}

}  // namespace rz
