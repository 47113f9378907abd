// kernels/cuda/cuda_backend.cu: CudaBackend, the op table on one GPU (the third of ggml's
// three layers: kernel -> launcher -> this). It owns what the launchers borrow: one
// compute stream (every op is queued on it in call order), the cuBLASLt handle and its
// workspace, grow-only device scratch for ops that need temporaries, and pinned host
// staging for the few ops that talk to the host (encoder_backward's token buckets, uploaded
// without a stream wait; sum_squares' partials, which wait). Device memory for Buffers
// comes from cudaMalloc through the DeviceAllocator registered with base/memory,
// zero-filled like host Buffers; never managed memory.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/launchers.cuh"
#include "kernels/device_provider.h"

namespace rz {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the "no driver" error
    return 0;
  }
  return n;
}

namespace {

using cuda::bf16_t;

// rz's storage types to the kernels' device types (layout-compatible: 4 and 2 bytes).
template <typename E>
struct DeviceType {
  using type = float;
};
template <>
struct DeviceType<bf16> {
  using type = bf16_t;
};
static_assert(sizeof(bf16) == sizeof(bf16_t));

template <typename E>
auto dev(E* p) {
  return reinterpret_cast<typename DeviceType<std::remove_const_t<E>>::type*>(p);
}
template <typename E>
auto dev(const E* p) {
  return reinterpret_cast<const typename DeviceType<E>::type*>(p);
}

void* device_alloc(int index, size_t bytes) {
  CUDA_CHECK(cudaSetDevice(index));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    fail(strfmt("cuda:%d: out of device memory allocating %s (%s free of %s): %s", index,
                format_bytes(double(bytes)).c_str(), format_bytes(double(free_bytes)).c_str(),
                format_bytes(double(total_bytes)).c_str(), cudaGetErrorString(err)));
  }
  // Zero-filled like host Buffers. cudaMemset runs on the legacy default stream, which
  // every op of the (blocking) compute stream waits for.
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

void device_free(int index, void* p) {
  // No throwing from destructors: a failure here is reported by the next checked call.
  if (cudaSetDevice(index) == cudaSuccess) (void)cudaFree(p);
}

// Device memory that only grows (cudaFree synchronises the device, so no queued kernel
// still uses the old block when it is replaced).
class DeviceScratch {
 public:
  ~DeviceScratch() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      if (ptr_) CUDA_CHECK(cudaFree(ptr_));
      ptr_ = nullptr;
      bytes_ = 0;
      CUDA_CHECK(cudaMalloc(&ptr_, bytes));
      bytes_ = bytes;
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory that only grows. Callers synchronise the stream before reusing it.
class HostStaging {
 public:
  ~HostStaging() {
    if (ptr_) (void)cudaFreeHost(ptr_);
  }
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      if (ptr_) CUDA_CHECK(cudaFreeHost(ptr_));
      ptr_ = nullptr;
      bytes_ = 0;
      CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
      bytes_ = bytes;
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// What the ops of one GPU share. Every public op first makes `index` the calling
// thread's current device (the comm thread calls accumulate_f32, for one).
struct CudaContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  cuda::BlasLt lt;
  enum Slot { kScratchA, kScratchB, kScratchInts, kScratchSums, kNumSlots };
  DeviceScratch scratch[kNumSlots];
  HostStaging staging_ints, staging_sums;
  cudaEvent_t ints_uploaded = nullptr;  // after encoder_backward's upload from staging_ints

  void bind() const { CUDA_CHECK(cudaSetDevice(index)); }
  float* floats(Slot s, size_t n) { return static_cast<float*>(scratch[s].get(n * sizeof(float))); }
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(stream)); }
};

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

template <typename E>
class CudaOps final : public Ops<E> {
 public:
  explicit CudaOps(CudaContext* ctx) : ctx_(ctx) {}

  void encoder_forward(E* out, const int* inp, const E* wte, const E* wpe, int B, int T, int C) override {
    ctx_->bind();
    cuda::encoder_forward(dev(out), inp, dev(wte), dev(wpe), B, T, C, ctx_->stream);
  }

  // dwte without atomics: positions are grouped by token on the host from the host's ids
  // (ascending position within a token, so fp32 sums follow the CPU's order), and one block
  // column per distinct token adds its positions. No read-back and no stream wait: only the
  // previous call's upload from the pinned staging must be done before it is rewritten.
  void encoder_backward(E* dwte, E* dwpe, const E* dout, const int* host_inp, int B, int T, int C) override {
    ctx_->bind();
    const size_t BT = size_t(B) * T;
    cuda::encoder_backward_wpe(dev(dwpe), dev(dout), B, T, C, ctx_->stream);
    if (BT == 0) return;
    if (ctx_->ints_uploaded == nullptr)
      CUDA_CHECK(cudaEventCreateWithFlags(&ctx_->ints_uploaded, cudaEventDisableTiming));
    else
      CUDA_CHECK(cudaEventSynchronize(ctx_->ints_uploaded));  // a step ago: long finished
    int* host = static_cast<int*>(ctx_->staging_ints.get(sizeof(int) * (3 * BT + 1)));
    int* tokens = host;                  // (nbuckets) the distinct tokens, ascending
    int* starts = host + BT;             // (nbuckets + 1)
    int* positions = host + 2 * BT + 1;  // (BT) grouped by token
    std::iota(positions, positions + BT, 0);
    std::stable_sort(positions, positions + BT, [&](int a, int b) { return host_inp[a] < host_inp[b]; });
    int nbuckets = 0;
    for (size_t j = 0; j < BT; ++j) {
      if (j == 0 || host_inp[positions[j]] != host_inp[positions[j - 1]]) {
        tokens[nbuckets] = host_inp[positions[j]];
        starts[nbuckets++] = int(j);
      }
    }
    starts[nbuckets] = int(BT);
    int* d = static_cast<int*>(ctx_->scratch[CudaContext::kScratchInts].get(sizeof(int) * (3 * BT + 1)));
    CUDA_CHECK(cudaMemcpyAsync(d, host, sizeof(int) * (3 * BT + 1), cudaMemcpyHostToDevice, ctx_->stream));
    CUDA_CHECK(cudaEventRecord(ctx_->ints_uploaded, ctx_->stream));
    cuda::encoder_backward_wte(dev(dwte), dev(dout), d, d + BT, d + 2 * BT + 1, nbuckets, C, ctx_->stream);
  }

  void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight, const E* bias, int N,
                         int C) override {
    ctx_->bind();
    cuda::layernorm_forward(dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, ctx_->stream);
  }
  void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                          const float* mean, const float* rstd, int N, int C) override {
    ctx_->bind();
    float* partials = ctx_->floats(CudaContext::kScratchA, 2 * cuda::column_partials_floats(N, C));
    cuda::layernorm_backward(dev(dinp), dev(dweight), dev(dbias), dev(dout), dev(inp), dev(weight), mean, rstd, N, C,
                             partials, ctx_->stream);
  }

  void matmul_forward(E* out, const E* inp, const E* weight, const E* bias, int N, int C, int OC) override {
    ctx_->bind();
    cuda::matmul_forward(ctx_->lt, dev(out), dev(inp), dev(weight), dev(bias), N, C, OC, ctx_->stream);
  }
  void matmul_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight, int N, int C,
                       int OC) override {
    ctx_->bind();
    cuda::matmul_backward(ctx_->lt, dev(dinp), dev(dweight), dev(dout), dev(inp), dev(weight), N, C, OC,
                          ctx_->stream);
    if (dbias) {
      float* partials = ctx_->floats(CudaContext::kScratchA, cuda::column_partials_floats(N, OC));
      cuda::bias_backward(dev(dbias), dev(dout), N, OC, partials, ctx_->stream);
    }
  }

  void attention_forward(E* out, E* att, const E* qkv, int B, int T, int C, int NH, int NKV) override {
    ctx_->bind();
    check_attention_shape(__func__, B, T, C, NH, NKV);
    float* scores = ctx_->floats(CudaContext::kScratchA, size_t(NH) * T * T);
    cuda::attention_forward(ctx_->lt, dev(out), dev(att), dev(qkv), B, T, C, NH, NKV, scores, ctx_->stream);
  }
  void attention_backward(E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C, int NH,
                          int NKV) override {
    ctx_->bind();
    check_attention_shape(__func__, B, T, C, NH, NKV);
    float* datt = ctx_->floats(CudaContext::kScratchA, size_t(NH) * T * T);
    auto* dpre = static_cast<typename DeviceType<E>::type*>(
        ctx_->scratch[CudaContext::kScratchB].get(size_t(NH) * T * T * sizeof(E)));
    cuda::attention_backward(ctx_->lt, dev(dqkv), dev(dout), dev(qkv), dev(att), B, T, C, NH, NKV, datt, dpre,
                             ctx_->stream);
  }

  void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV) override {
    ctx_->bind();
    check_flash_shape(__func__, B, T, C, NH, NKV);
    cuda::attention_forward_flash(dev(out), lse, dev(qkv), B, T, C, NH, NKV, ctx_->stream);
  }
  void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C, int NH,
                                int NKV) override {
    ctx_->bind();
    check_flash_shape(__func__, B, T, C, NH, NKV);
    float* D = ctx_->floats(CudaContext::kScratchA, size_t(B) * NH * T);
    cuda::attention_backward_flash(dev(dqkv), dev(dout), dev(qkv), lse, B, T, C, NH, NKV, D, ctx_->stream);
  }

  void attention_forward_kv(E* out, const E* q, const E* k_cache, const E* v_cache, int B, int Tq, int pos, int Tc,
                            int NH, int NKV, int hs) override {
    ctx_->bind();
    check_attention_kv_shape(B, Tq, pos, Tc, NH, NKV, hs);
    RZ_CHECK(hs <= cuda::attention_kv_max_head_size() && size_t(B) * Tq * NH <= size_t(INT_MAX),
             "attention_forward_kv: head size %d must be at most %d, and B*Tq*NH = %zu rows at most 2^31 - 1", hs,
             cuda::attention_kv_max_head_size(), size_t(B) * Tq * NH);
    cuda::attention_forward_kv(dev(out), dev(q), dev(k_cache), dev(v_cache), B, Tq, pos, Tc, NH, NKV, hs,
                               ctx_->stream);
  }

  void rmsnorm_forward(E* out, float* rstd, const E* inp, const E* weight, int N, int C, float eps) override {
    ctx_->bind();
    RZ_CHECK(N >= 0 && C >= 1, "rmsnorm_forward: N=%d rows of C=%d channels", N, C);
    cuda::rmsnorm_forward(dev(out), rstd, dev(inp), dev(weight), N, C, eps, ctx_->stream);
  }
  void rmsnorm_backward(E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, const float* rstd, int N,
                        int C) override {
    ctx_->bind();
    RZ_CHECK(N >= 0 && C >= 1, "rmsnorm_backward: N=%d rows of C=%d channels", N, C);
    float* partials = ctx_->floats(CudaContext::kScratchA, cuda::column_partials_floats(N, C));
    cuda::rmsnorm_backward(dev(dinp), dev(dweight), dev(dout), dev(inp), dev(weight), rstd, N, C, partials,
                           ctx_->stream);
  }

  void rope_forward(E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) override {
    rope(__func__, qkv, B, T, NH, NKV, hs, pos0, theta, false);
  }
  void rope_backward(E* dqkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) override {
    rope(__func__, dqkv, B, T, NH, NKV, hs, pos0, theta, true);
  }

  void swiglu_forward(E* out, const E* gate_up, int N, int H) override {
    ctx_->bind();
    RZ_CHECK(N >= 0 && H >= 1, "swiglu_forward: N=%d rows of H=%d", N, H);
    cuda::swiglu_forward(dev(out), dev(gate_up), N, H, ctx_->stream);
  }
  void swiglu_backward(E* dgate_up, const E* dout, const E* gate_up, int N, int H) override {
    ctx_->bind();
    RZ_CHECK(N >= 0 && H >= 1, "swiglu_backward: N=%d rows of H=%d", N, H);
    cuda::swiglu_backward(dev(dgate_up), dev(dout), dev(gate_up), N, H, ctx_->stream);
  }

  void gelu_forward(E* out, const E* inp, size_t n) override {
    ctx_->bind();
    cuda::gelu_forward(dev(out), dev(inp), n, ctx_->stream);
  }
  void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n) override {
    ctx_->bind();
    cuda::gelu_backward(dev(dinp), dev(inp), dev(dout), n, ctx_->stream);
  }
  void residual_forward(E* out, const E* a, const E* b, size_t n) override {
    ctx_->bind();
    cuda::residual_forward(dev(out), dev(a), dev(b), n, ctx_->stream);
  }

  void crossentropy_forward(float* losses, float* lse, const E* logits, const int* targets, int N, int V,
                            int Vp) override {
    ctx_->bind();
    cuda::crossentropy_forward(losses, lse, dev(logits), targets, N, V, Vp, ctx_->stream);
  }
  void crossentropy_softmax_backward(E* logits, const float* lse, const int* targets, float dloss, int N, int V,
                                     int Vp) override {
    ctx_->bind();
    cuda::crossentropy_softmax_backward(dev(logits), lse, targets, dloss, N, V, Vp, ctx_->stream);
  }

 private:
  static void check_flash_shape(const char* op, int B, int T, int C, int NH, int NKV) {
    check_attention_shape(op, B, T, C, NH, NKV);
    RZ_CHECK(C / NH <= cuda::flash_max_head_size(), "%s: head size C/NH = %d/%d must be at most %d", op, C, NH,
             cuda::flash_max_head_size());
  }
  // The table of inverse frequencies is made here, on the host, by the CPU's function.
  void rope(const char* op, E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta, bool backward) {
    ctx_->bind();
    check_rope_shape(op, B, T, NH, NKV, hs, pos0, theta);
    RZ_CHECK(hs / 2 <= cuda::kRopeMaxHalf, "%s: head size %d must be at most %d", op, hs, 2 * cuda::kRopeMaxHalf);
    cuda::RopeFreqs freqs{};
    for (int i = 0; i < hs / 2; ++i) freqs.inv_freq[i] = rope_inv_freq(theta, hs, i);
    cuda::rope(dev(qkv), B, T, NH, NKV, hs, pos0, freqs, backward, ctx_->stream);
  }

  CudaContext* ctx_;
};

// `--trace` on this GPU (base/trace.h): timing events on the compute stream (and on the
// nccl comm stream, stamp_on). The origin is
// an event recorded once the stream is idle and waited for, so "now" on the host is its
// device time; a stamp's time is cudaEventElapsedTime from it (about 0.5 us resolution).
// Events are created as stamps need them and reused after recycle().
class CudaTraceClock final : public trace::DeviceClock {
 public:
  explicit CudaTraceClock(CudaContext* ctx) : ctx_(ctx) {}
  ~CudaTraceClock() override {
    trace::forget_device_clock(this);
    if (cudaSetDevice(ctx_->index) != cudaSuccess) return;
    if (origin_) (void)cudaEventDestroy(origin_);
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  CudaTraceClock(const CudaTraceClock&) = delete;
  CudaTraceClock& operator=(const CudaTraceClock&) = delete;

  void set_origin() override {
    ctx_->bind();
    if (origin_ == nullptr) CUDA_CHECK(cudaEventCreate(&origin_));
    ctx_->sync();
    CUDA_CHECK(cudaEventRecord(origin_, ctx_->stream));
    CUDA_CHECK(cudaEventSynchronize(origin_));
  }
  uint64_t stamp() override { return stamp_on(ctx_->stream); }
  // Any stream of this device (--comm nccl's comm stream): cudaEventElapsedTime measures
  // between events of different streams of one device.
  uint64_t stamp_on(void* stream) override {
    ctx_->bind();
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));  // with timing (the default flags)
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], static_cast<cudaStream_t>(stream)));
    return used_++;
  }
  double since_origin_us(uint64_t ticket) override {
    RZ_CHECK(origin_ != nullptr && ticket < used_, "trace: device stamp %llu was never taken (origin %s)",
             (unsigned long long)ticket, origin_ ? "set" : "not set");
    ctx_->bind();
    CUDA_CHECK(cudaEventSynchronize(events_[ticket]));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, origin_, events_[ticket]));
    return 1e3 * double(ms);
  }
  void recycle() override { used_ = 0; }

 private:
  CudaContext* ctx_;
  cudaEvent_t origin_ = nullptr;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;  // events_[0 .. used_) hold unread stamps
};

// The stream a StreamScope gave this thread (backend.h), and for which backend.
thread_local const void* t_scope_owner = nullptr;
thread_local cudaStream_t t_scope_stream = nullptr;

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<CudaContext> ctx, std::string device_name)
      : Backend(std::make_unique<CudaOps<float>>(ctx.get()), std::make_unique<CudaOps<bf16>>(ctx.get())),
        ctx_(std::move(ctx)),
        device_name_(std::move(device_name)),
        clock_(std::make_unique<CudaTraceClock>(ctx_.get())) {}

  ~CudaBackend() override {
    clock_.reset();  // its events before the context they were made in
    if (cudaSetDevice(ctx_->index) != cudaSuccess) return;
    (void)cudaStreamSynchronize(ctx_->stream);
    if (ctx_->ints_uploaded) (void)cudaEventDestroy(ctx_->ints_uploaded);
    if (ctx_->lt.workspace) (void)cudaFree(ctx_->lt.workspace);
    if (ctx_->lt.handle) (void)cublasLtDestroy(ctx_->lt.handle);
    cuda::delete_gemm_plan_cache(ctx_->lt.plans);
    (void)cudaStreamDestroy(ctx_->stream);
  }

  Device device() const override { return Device{DeviceKind::cuda, ctx_->index}; }
  trace::DeviceClock* trace_clock() override { return clock_.get(); }
  std::string name() const override { return strfmt("cuda:%d (%s)", ctx_->index, device_name_.c_str()); }
  bool driver_memory(size_t* used, size_t* total) override {
    ctx_->bind();
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    *used = total_bytes - free_bytes;
    *total = total_bytes;
    return true;
  }

  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    ctx_->bind();
    // From pageable memory the call returns once the source has been staged, so the
    // caller may reuse host_src at once; the copy stays ordered on the stream.
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, ctx_->stream));
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    ctx_->bind();
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream));
    ctx_->sync();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    ctx_->bind();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, op_stream()));
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes == 0) return;
    ctx_->bind();
    CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, op_stream()));
  }
  void synchronize() override {
    ctx_->bind();
    ctx_->sync();
  }

  std::shared_ptr<void> mark(void* stream) override {
    ctx_->bind();
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::shared_ptr<void> m(e, [](void* p) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
    CUDA_CHECK(cudaEventRecord(e, stream != nullptr ? static_cast<cudaStream_t>(stream) : ctx_->stream));
    return m;
  }
  void wait_for(const std::shared_ptr<void>& mark) override {
    if (mark == nullptr) return;
    ctx_->bind();
    CUDA_CHECK(cudaStreamWaitEvent(ctx_->stream, static_cast<cudaEvent_t>(mark.get()), 0));
  }

  void f32_to_bf16(bf16* out, const float* in, size_t n) override {
    ctx_->bind();
    cuda::f32_to_bf16(dev(out), in, n, op_stream());  // a StreamScope's stream too: fp32 reductions narrow there
  }
  void bf16_to_f32(float* out, const bf16* in, size_t n) override {
    ctx_->bind();
    cuda::bf16_to_f32(out, dev(in), n, ctx_->stream);
  }

  void accumulate_f32(float* dst, const float* src, size_t n, bool assign) override {
    ctx_->bind();
    cuda::accumulate_f32(dst, src, n, assign, op_stream());
  }
  void accumulate_f32(float* dst, const bf16* src, size_t n, bool assign) override {
    ctx_->bind();
    cuda::accumulate_f32(dst, dev(src), n, assign, op_stream());
  }

  void accumulate_bf16(bf16* dst, const bf16* src, size_t n, bool assign) override {
    ctx_->bind();
    cuda::accumulate_bf16(dev(dst), dev(src), n, assign, op_stream());
  }

  double sum_squares(const float* x, size_t n) override { return sum_squares_of(x, n); }
  double sum_squares(const bf16* x, size_t n) override { return sum_squares_of(dev(x), n); }

  void adamw_update(float* params, float* master, float* m, float* v, const float* grads, size_t n,
                    const AdamWStep& s) override {
    RZ_CHECK(master != nullptr || params != nullptr, "adamw_update: no weights to update");
    update(params, master, m, v, grads, n, s);
  }
  void adamw_update(bf16* params, float* master, float* m, float* v, const bf16* grads, size_t n,
                    const AdamWStep& s) override {
    RZ_CHECK(master != nullptr, "adamw_update: bf16 parameters need fp32 master weights");
    update(dev(params), master, m, v, dev(grads), n, s);
  }
  void adamw_update(bf16* params, float* master, float* m, float* v, const float* grads, size_t n,
                    const AdamWStep& s) override {
    RZ_CHECK(master != nullptr, "adamw_update: bf16 parameters need fp32 master weights");
    update(dev(params), master, m, v, grads, n, s);
  }

 protected:
  void* set_thread_stream(void* stream) override {
    void* prev = t_scope_owner == this ? t_scope_stream : nullptr;
    t_scope_owner = this;
    t_scope_stream = static_cast<cudaStream_t>(stream);
    return prev;
  }

 private:
  // copy, zero, accumulate_* and f32_to_bf16: a StreamScope's stream on this thread, else the compute stream.
  cudaStream_t op_stream() const {
    return t_scope_owner == this && t_scope_stream != nullptr ? t_scope_stream : ctx_->stream;
  }

  // One launch per call without spans; with spans, neighbouring spans of one kind merge and
  // each launch takes up to kAdamWMaxSpans of them (one launch per bucket in practice).
  template <typename P, typename G>
  void update(P* params, float* master, float* m, float* v, const G* grads, size_t n, const AdamWStep& s) {
    RZ_CHECK(s.t >= 1, "adamw_update: step t must be >= 1, found %llu", (unsigned long long)s.t);
    check_adamw_spans(s, n);
    ctx_->bind();
    // The bias corrections exactly as the CPU computes them (fp32 pow on the host).
    cuda::AdamWArgs a{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale,
                      1.0f - std::pow(s.beta1, float(s.t)), 1.0f - std::pow(s.beta2, float(s.t))};
    if (s.num_spans == 0) {
      cuda::adamw_update(params, master, m, v, grads, n, a, cuda::AdamWSpans{}, ctx_->stream);
      return;
    }
    std::vector<AdamWSpan> merged;
    for (size_t k = 0; k < s.num_spans; ++k) {
      if (!merged.empty() && merged.back().decay == s.spans[k].decay)
        merged.back().end = s.spans[k].end;
      else
        merged.push_back(s.spans[k]);
    }
    size_t k = 0, end = 0;
    while (k < merged.size()) {
      const size_t first = end;
      cuda::AdamWSpans group;
      for (; k < merged.size() && group.count < cuda::kAdamWMaxSpans; ++k) {
        group.end[group.count] = merged[k].end - first;
        if (merged[k].decay) group.decay_mask |= 1ull << group.count;
        ++group.count;
        end = merged[k].end;
      }
      cuda::adamw_update(params ? params + first : nullptr, master ? master + first : nullptr, m + first, v + first,
                         grads + first, end - first, a, group, ctx_->stream);
    }
  }

  template <typename S>
  double sum_squares_of(const S* x, size_t n) {
    const size_t chunks = cuda::sum_squares_chunks(n);
    if (chunks == 0) return 0.0;
    ctx_->bind();
    auto* partials = static_cast<double*>(ctx_->scratch[CudaContext::kScratchSums].get(chunks * sizeof(double)));
    auto* host = static_cast<double*>(ctx_->staging_sums.get(chunks * sizeof(double)));
    cuda::sum_squares_partials(partials, x, n, ctx_->stream);
    CUDA_CHECK(cudaMemcpyAsync(host, partials, chunks * sizeof(double), cudaMemcpyDeviceToHost, ctx_->stream));
    ctx_->sync();
    double total = 0.0;
    for (size_t k = 0; k < chunks; ++k) total += host[k];
    return total;
  }

  std::unique_ptr<CudaContext> ctx_;
  std::string device_name_;
  std::unique_ptr<CudaTraceClock> clock_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    const char* what = err == cudaErrorInsufficientDriver ? "no CUDA driver, or one older than this build's CUDA runtime"
                       : err == cudaErrorNoDevice || err == cudaSuccess ? "no CUDA device is visible to this process"
                                                                         : "CUDA cannot be used here";
    fail(strfmt("device cuda:%d: %s (cudaGetDeviceCount: %s)", index, what,
                err == cudaSuccess ? "0 devices" : cudaGetErrorString(err)));
  }
  if (index < 0 || index >= count)
    fail(strfmt("device cuda:%d: no such GPU (this process sees %d, cuda:0 .. cuda:%d)", index, count, count - 1));
  CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  register_device_allocator(DeviceKind::cuda, DeviceAllocator{device_alloc, device_free});

  auto ctx = std::make_unique<CudaContext>();
  ctx->index = index;
  // A blocking stream: it waits for the legacy default stream, where cudaMemset zeroes
  // fresh Buffers.
  CUDA_CHECK(cudaStreamCreate(&ctx->stream));
  CUBLAS_CHECK(cublasLtCreate(&ctx->lt.handle));
  CUDA_CHECK(cudaMalloc(&ctx->lt.workspace, kWorkspaceBytes));
  ctx->lt.workspace_bytes = kWorkspaceBytes;
  ctx->lt.plans = cuda::new_gemm_plan_cache();
  return std::make_unique<CudaBackend>(std::move(ctx), prop.name);
}

// This file is the cuda kind's provider wherever it is linked (kernels/device_provider.h):
// built by nvcc against the CUDA runtime for ringzero, as C++ against the CUDA-on-CPU
// emulator for the tests' emulated binaries.
const DeviceProvider& cuda_provider() {
  static const DeviceProvider provider{
      [] {
        int count = 0;
        const cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess) {
          const std::string why = strfmt("no usable CUDA driver or device (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
          (void)cudaGetLastError();
          return why;
        }
        return count == 0 ? std::string("no CUDA device is visible to this process") : std::string();
      },
      cuda_device_count,
      make_cuda_backend,
  };
  return provider;
}

}  // namespace rz
