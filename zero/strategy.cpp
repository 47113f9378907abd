// zero/strategy.cpp: the core every strategy shares (bucket cursor, accounting, the AdamW
// call), the owned layout ranges, make_strategy, and the shared part of the checkpoint
// state (the chunk size, the helpers over visit_*, the model's own parameters).
#include "zero/strategy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/bf16.h"
#include "zero/ddp.h"
#include "zero/strategy_core.h"
#include "zero/zero1.h"
#include "zero/zero2.h"
#include "zero/zero3.h"

namespace rz {

StrategyCore::StrategyCore(GPT2& model, Communicator& comm, const StrategyOptions& opts)
    : model_(model),
      be_(model.backend()),
      comm_(comm),
      host_comm_(comm, model.backend()),
      opts_(opts),
      layout_(model.layout()),
      precision_(model.precision()),
      grad_dtype_(model.precision() == Precision::fp32 ? DType::f32 : DType::bf16),
      grad_bytes_(precision_bytes(model.precision())),
      nranks_(comm.size()),
      rank_(comm.rank()),
      plan_(strategy_bucket_plan(model.layout(), opts.kind, model.precision(), comm.size(), opts.bucket_mb,
                                 opts.buckets_per_unit)) {
  check_strategy_device(opts.kind, !model.device().is_cpu(), "device " + device_name(model.device()));
  RZ_CHECK(opts.buckets_in_flight >= 1, "buckets in flight: expected at least 1, found %d",
           opts.buckets_in_flight);
  RZ_CHECK(std::isfinite(opts.grad_clip), "gradient clipping threshold: expected a finite number, found %g",
           static_cast<double>(opts.grad_clip));
  reduce_dtype_ = opts.grad_reduce_fp32 ? DType::f32 : grad_dtype_;
  if (reduce_dtype_ != grad_dtype_) wide_.allocate(wide_reduce_pool(plan_, opts.buckets_in_flight), be_);
}

int StrategyCore::widen_bucket(int b, const void* grads, float** wide) {
  const int i = wide_.acquire(grad_work_, &exposed_s_);
  *wide = wide_.data(i);
  be_.bf16_to_f32(*wide, static_cast<const bf16*>(grads), plan_.buckets[b].padded);
  return i;
}

GradSink& StrategyCore::begin_micro_step(int micro, int accum) {
  RZ_CHECK(accum >= 1 && micro >= 0 && micro < accum,
           "begin_micro_step: micro-step %d of %d is out of range", micro, accum);
  RZ_CHECK(micro == 0 || (micro == micro_ + 1 && accum == accum_),
           "begin_micro_step: expected micro-step %d of %d next, got %d of %d", micro_ + 1, accum_,
           micro, accum);
  micro_ = micro;
  accum_ = accum;
  ready_upto_ = 0;
  next_bucket_ = 0;
  if (micro == 0) {
    if (!window_open_) open_window();
    begin_window();
  }
  begin_micro();
  return *this;
}

void StrategyCore::grads_ready(size_t begin, size_t end) {
  RZ_CHECK(begin == ready_upto_ && end >= begin && end <= plan_.total,
           "grads_ready: expected a range starting at %zu within %zu, got [%zu, %zu)", ready_upto_,
           plan_.total, begin, end);
  ready_upto_ = end;
  const bool communicate = communicates_every_micro_step() || micro_ == accum_ - 1;
  while (next_bucket_ < static_cast<int>(plan_.buckets.size()) &&
         plan_.buckets[next_bucket_].end <= ready_upto_) {
    if (communicate) submit_bucket_labelled(next_bucket_);
    ++next_bucket_;
  }
}

void StrategyCore::end_micro_step() {
  RZ_CHECK(ready_upto_ == plan_.total,
           "end_micro_step: backward reported gradients for %zu of %zu parameters", ready_upto_,
           plan_.total);
}

void StrategyCore::open_window() {
  window_start_stats_ = comm_.stats();
  exposed_s_ = 0.0;
  gather_exposed_s_ = 0.0;
  window_open_ = true;
}

void StrategyCore::wait_grad_work() {
  RZ_TRACE_SCOPE("wait for gradient collectives");
  auto t0 = Clock::now();
  for (auto& w : grad_work_) w->wait();
  grad_work_.clear();
  exposed_s_ += seconds_since(t0);
}

StepStats StrategyCore::finish_stats(double grad_norm) {
  const CommStats& now = comm_.stats();
  StepStats s;
  s.grad_norm = static_cast<float>(grad_norm);
  CommCounters total_now = now.total(), total_then = window_start_stats_.total();
  s.comm_bytes_sent = total_now.bytes_sent - total_then.bytes_sent;
  s.comm_seconds = total_now.seconds - total_then.seconds;
  double grad_s = 0.0;
  for (CollectiveKind k : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter}) {
    int i = static_cast<int>(k);
    grad_s += now.by_kind[i].seconds - window_start_stats_.by_kind[i].seconds;
  }
  s.comm_overlapped = grad_s > 0.0 ? std::clamp(1.0 - exposed_s_ / grad_s, 0.0, 1.0) : 0.0;
  if (strategy_traits(kind()).shards_params) {
    const int ag = static_cast<int>(CollectiveKind::all_gather);
    const double gather_s = now.by_kind[ag].seconds - window_start_stats_.by_kind[ag].seconds;
    s.gather_hidden = gather_s > 0.0 ? std::clamp(1.0 - gather_exposed_s_ / gather_s, 0.0, 1.0) : 0.0;
  }
  window_open_ = false;
  return s;
}

void StrategyCore::adamw(int b, size_t lo, size_t hi, float* master, void* param, const void* grad,
                         DType grad_dtype, float* m, float* v, float lr, float grad_scale) const {
  if (hi <= lo) return;
  const size_t n = hi - lo;
  // The bucket's tensors clipped to [lo, hi), as spans of the call (kernels/cpu/adamw.h).
  const Bucket& bk = plan_.buckets[b];
  std::vector<AdamWSpan> spans;
  for (int i = bk.first_tensor; i < bk.first_tensor + bk.num_tensors; ++i) {
    const ParamTensor& t = layout_.tensors[i];
    const size_t a = std::max(lo, t.offset), e = std::min(hi, t.offset + t.numel);
    if (a < e) spans.push_back(AdamWSpan{e - lo, t.weight_decay});
  }
  AdamWStep s;
  s.lr = lr;
  s.beta1 = opts_.adamw.beta1;
  s.beta2 = opts_.adamw.beta2;
  s.eps = opts_.adamw.eps;
  s.weight_decay = opts_.adamw.weight_decay;
  s.grad_scale = grad_scale;
  s.t = t_;
  s.spans = spans.data();
  s.num_spans = spans.size();
  if (precision_ == Precision::fp32) {
    // fp32 mode: the params are the master weights.
    RZ_CHECK(grad_dtype == DType::f32, "adamw: fp32 params with %s gradients", dtype_name(grad_dtype));
    be_.adamw_update(static_cast<float*>(param), nullptr, m, v, static_cast<const float*>(grad), n, s);
  } else if (grad_dtype == DType::bf16) {
    be_.adamw_update(static_cast<bf16*>(param), master, m, v, static_cast<const bf16*>(grad), n, s);
  } else {
    // zero2 in bf16 mode: the owned gradient shard is fp32.
    be_.adamw_update(static_cast<bf16*>(param), master, m, v, static_cast<const float*>(grad), n, s);
  }
}

std::vector<std::pair<size_t, size_t>> owned_layout_ranges(const BucketPlan& plan, int rank) {
  std::vector<std::pair<size_t, size_t>> out;
  for (int b = 0; b < static_cast<int>(plan.buckets.size()); ++b) {
    auto r = plan.owned_layout_range(b, rank);
    if (r.second > r.first) out.push_back(r);
  }
  return out;
}

std::unique_ptr<Strategy> make_strategy(GPT2& model, Communicator& comm, const StrategyOptions& opts) {
  switch (opts.kind) {
    case StrategyKind::ddp: return std::make_unique<DDPStrategy>(model, comm, opts);
    case StrategyKind::zero1: return std::make_unique<Zero1Strategy>(model, comm, opts);
    case StrategyKind::zero2: return std::make_unique<Zero2Strategy>(model, comm, opts);
    case StrategyKind::zero3: return std::make_unique<Zero3Strategy>(model, comm, opts);
  }
  RZ_FAIL("make_strategy: unknown strategy %d", static_cast<int>(opts.kind));
}

// --- checkpoint state: the chunk size, the helpers over visit_*, and the model's own
// parameters (ddp, zero1, zero2). Chunks point into the strategy's arrays where they are
// fp32 on the host; else they pass through one scratch buffer (MemTag::workspace, so the
// tracker sees it) of at most state_chunk_elems() floats.

float* StrategyCore::scratch_for(Buffer<float>& scratch, size_t n) {
  if (scratch.size() < n) scratch.allocate(MemTag::workspace, n);
  return scratch.data();
}

size_t Strategy::state_chunk_elems() const {
  const double elems = options().bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  return std::max<size_t>(size_t{1} << 14, elems < 1e15 ? static_cast<size_t>(elems) : size_t{1} << 50);
}

void Strategy::get_optimizer_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) const {
  master.clear();
  m.clear();
  v.clear();
  visit_optimizer_state([&](StateArray a, const float* p, size_t n) {
    std::vector<float>& out = a == StateArray::master ? master : a == StateArray::m ? m : v;
    out.insert(out.end(), p, p + n);
  });
}

void Strategy::params_f32(float* out) {
  const ParamChunkFn fn = [out](size_t begin, const float* p, size_t n) {
    std::memcpy(out + begin, p, n * sizeof(float));
  };
  visit_params_f32(out != nullptr ? &fn : nullptr);
}

void StrategyCore::visit_params_f32(const ParamChunkFn* fn) {
  if (fn == nullptr) return;
  const size_t total = layout_.total;
  if (precision_ == Precision::fp32 && model_.device().is_cpu()) {
    (*fn)(0, static_cast<const float*>(model_.params()), total);
    return;
  }
  Buffer<float> scratch;
  const size_t chunk = std::min(total, state_chunk_elems());
  for (size_t b = 0; b < total; b += chunk) {
    const size_t n = std::min(chunk, total - b);
    model_.get_params_f32(b, n, scratch_for(scratch, chunk));
    (*fn)(b, scratch.data(), n);
  }
}

void StrategyCore::visit_stored_f32(StateArray array, const float* src, size_t n, const StateChunkFn& fn,
                                    Buffer<float>& scratch) const {
  if (n == 0) return;
  if (model_.device().is_cpu()) {
    fn(array, src, n);
    return;
  }
  const size_t chunk = std::min(n, state_chunk_elems());
  for (size_t i = 0; i < n; i += chunk) {
    const size_t k = std::min(chunk, n - i);
    be_.copy_to_host(scratch_for(scratch, chunk), src + i, k * sizeof(float));
    fn(array, scratch.data(), k);
  }
}

}  // namespace rz
