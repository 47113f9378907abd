// kernels/sim/sim_backend.cpp: the simulated device's op table (see sim_backend.h).
// Each op is one line of checks and translations around the CPU backend's op.
#include "kernels/sim/sim_backend.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/sim_device.h"
#include "base/trace.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/rope.h"

namespace rz {
namespace {

// The read-write view of n elements of a device operand; throws naming op and argument.
template <typename T>
T* view(T* p, size_t n, const char* op, const char* arg) {
  return static_cast<T*>(sim::host_view(p, n * sizeof(T), op, arg));
}
template <typename T>
T* view_or_null(T* p, size_t n, const char* op, const char* arg) {
  return p == nullptr ? p : view(p, n, op, arg);
}
// Inside an op: DEV(ptr, elements) names the op (__func__) and the argument (#ptr).
#define DEV(p, n) view((p), size_t(n), __func__, #p)
#define DEV_OR_NULL(p, n) view_or_null((p), size_t(n), __func__, #p)

template <typename E>
class SimOps final : public Ops<E> {
 public:
  void encoder_forward(E* out, const int* inp, const E* wte, const E* wpe, int B, int T, int C) override {
    // wte's rows are only known to be below Vp; the model's tokens are checked below V.
    cpu().encoder_forward(DEV(out, size_t(B) * T * C), DEV(inp, size_t(B) * T), wte_view(wte, inp, B, T, C, __func__),
                          DEV(wpe, size_t(T) * C), B, T, C);
  }
  // The token ids are the host's copy here (backend.h).
  void encoder_backward(E* dwte, E* dwpe, const E* dout, const int* host_inp, int B, int T, int C) override {
    sim::check_host(host_inp, size_t(B) * T * sizeof(int), __func__, "host_inp");
    cpu().encoder_backward(DEV(dwte, size_t(max_token(host_inp, B, T) + 1) * C), DEV(dwpe, size_t(T) * C),
                           DEV(dout, size_t(B) * T * C), host_inp, B, T, C);
  }
  void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight, const E* bias, int N,
                         int C) override {
    const size_t NC = size_t(N) * C;
    cpu().layernorm_forward(DEV(out, NC), DEV(mean, N), DEV(rstd, N), DEV(inp, NC), DEV(weight, C), DEV(bias, C), N, C);
  }
  void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                          const float* mean, const float* rstd, int N, int C) override {
    const size_t NC = size_t(N) * C;
    cpu().layernorm_backward(DEV(dinp, NC), DEV(dweight, C), DEV(dbias, C), DEV(dout, NC), DEV(inp, NC),
                             DEV(weight, C), DEV(mean, N), DEV(rstd, N), N, C);
  }
  void matmul_forward(E* out, const E* inp, const E* weight, const E* bias, int N, int C, int OC) override {
    cpu().matmul_forward(DEV(out, size_t(N) * OC), DEV(inp, size_t(N) * C), DEV(weight, size_t(OC) * C),
                         DEV_OR_NULL(bias, OC), N, C, OC);
  }
  void matmul_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight, int N, int C,
                       int OC) override {
    cpu().matmul_backward(DEV_OR_NULL(dinp, size_t(N) * C), DEV(dweight, size_t(OC) * C), DEV_OR_NULL(dbias, OC),
                          DEV(dout, size_t(N) * OC), DEV(inp, size_t(N) * C), DEV(weight, size_t(OC) * C), N, C, OC);
  }
  // check_attention_shape first: the extents below trust C % NH and NH % NKV.
  void attention_forward(E* out, E* att, const E* qkv, int B, int T, int C, int NH, int NKV) override {
    check_attention_shape(__func__, B, T, C, NH, NKV);
    const size_t N = size_t(B) * T;
    cpu().attention_forward(DEV(out, N * C), DEV(att, size_t(B) * NH * T * T), DEV(qkv, N * qkv_width(C, NH, NKV)), B,
                            T, C, NH, NKV);
  }
  void attention_backward(E* dqkv, const E* dout, const E* qkv, const E* att, int B, int T, int C, int NH,
                          int NKV) override {
    check_attention_shape(__func__, B, T, C, NH, NKV);
    const size_t N = size_t(B) * T, W = qkv_width(C, NH, NKV);
    cpu().attention_backward(DEV(dqkv, N * W), DEV(dout, N * C), DEV(qkv, N * W), DEV(att, size_t(B) * NH * T * T), B,
                             T, C, NH, NKV);
  }
  void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV) override {
    check_attention_shape(__func__, B, T, C, NH, NKV);
    const size_t N = size_t(B) * T;
    cpu().attention_forward_flash(DEV(out, N * C), DEV(lse, size_t(B) * NH * T), DEV(qkv, N * qkv_width(C, NH, NKV)),
                                  B, T, C, NH, NKV);
  }
  void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C, int NH,
                                int NKV) override {
    check_attention_shape(__func__, B, T, C, NH, NKV);
    const size_t N = size_t(B) * T, W = qkv_width(C, NH, NKV);
    cpu().attention_backward_flash(DEV(dqkv, N * W), DEV(dout, N * C), DEV(qkv, N * W), DEV(lse, size_t(B) * NH * T),
                                   B, T, C, NH, NKV);
  }
  void attention_forward_kv(E* out, const E* q, const E* k_cache, const E* v_cache, int B, int Tq, int pos, int Tc,
                            int NH, int NKV, int hs) override {
    check_attention_kv_shape(B, Tq, pos, Tc, NH, NKV, hs);  // before the sizes below are trusted
    const size_t Q = size_t(B) * Tq * NH * hs, KV = size_t(B) * Tc * NKV * hs;
    cpu().attention_forward_kv(DEV(out, Q), DEV(q, Q), DEV(k_cache, KV), DEV(v_cache, KV), B, Tq, pos, Tc, NH, NKV, hs);
  }
  void rmsnorm_forward(E* out, float* rstd, const E* inp, const E* weight, int N, int C, float eps) override {
    const size_t NC = size_t(N) * C;
    cpu().rmsnorm_forward(DEV(out, NC), DEV(rstd, N), DEV(inp, NC), DEV(weight, C), N, C, eps);
  }
  void rmsnorm_backward(E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, const float* rstd, int N,
                        int C) override {
    const size_t NC = size_t(N) * C;
    cpu().rmsnorm_backward(DEV(dinp, NC), DEV(dweight, C), DEV(dout, NC), DEV(inp, NC), DEV(weight, C), DEV(rstd, N),
                           N, C);
  }
  void rope_forward(E* qkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) override {
    check_rope_shape(__func__, B, T, NH, NKV, hs, pos0, theta);
    cpu().rope_forward(DEV(qkv, size_t(B) * T * (NH + 2 * NKV) * hs), B, T, NH, NKV, hs, pos0, theta);
  }
  void rope_backward(E* dqkv, int B, int T, int NH, int NKV, int hs, int pos0, float theta) override {
    check_rope_shape(__func__, B, T, NH, NKV, hs, pos0, theta);
    cpu().rope_backward(DEV(dqkv, size_t(B) * T * (NH + 2 * NKV) * hs), B, T, NH, NKV, hs, pos0, theta);
  }
  void swiglu_forward(E* out, const E* gate_up, int N, int H) override {
    cpu().swiglu_forward(DEV(out, size_t(N) * H), DEV(gate_up, size_t(N) * 2 * H), N, H);
  }
  void swiglu_backward(E* dgate_up, const E* dout, const E* gate_up, int N, int H) override {
    cpu().swiglu_backward(DEV(dgate_up, size_t(N) * 2 * H), DEV(dout, size_t(N) * H), DEV(gate_up, size_t(N) * 2 * H),
                          N, H);
  }
  void gelu_forward(E* out, const E* inp, size_t n) override { cpu().gelu_forward(DEV(out, n), DEV(inp, n), n); }
  void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n) override {
    cpu().gelu_backward(DEV(dinp, n), DEV(inp, n), DEV(dout, n), n);
  }
  void residual_forward(E* out, const E* a, const E* b, size_t n) override {
    cpu().residual_forward(DEV(out, n), DEV(a, n), DEV(b, n), n);
  }
  void crossentropy_forward(float* losses, float* lse, const E* logits, const int* targets, int N, int V,
                            int Vp) override {
    cpu().crossentropy_forward(DEV(losses, N), DEV(lse, N), DEV(logits, size_t(N) * Vp), DEV(targets, N), N, V, Vp);
  }
  void crossentropy_softmax_backward(E* logits, const float* lse, const int* targets, float dloss, int N, int V,
                                     int Vp) override {
    cpu().crossentropy_softmax_backward(DEV(logits, size_t(N) * Vp), DEV(lse, N), DEV(targets, N), dloss, N, V, Vp);
  }

 private:
  static Ops<E>& cpu() { return cpu_backend().ops<E>(); }
  // Elements per row of a grouped-query qkv: q (C), k and v (NKV * C/NH each).
  static size_t qkv_width(int C, int NH, int NKV) { return size_t(C) + 2 * size_t(NKV) * size_t(C / NH); }
  // wte (Vp, C) is read at the rows the tokens name: its allocation must hold at least
  // (max token + 1) rows. tok: host memory (the forward's device ids through their view).
  static int max_token(const int* tok, int B, int T) {
    int m = 0;
    for (size_t i = 0; i < size_t(B) * T; ++i) m = std::max(m, tok[i]);
    return m;
  }
  static const E* wte_view(const E* wte, const int* inp, int B, int T, int C, const char* op) {
    const int* tok = view(inp, size_t(B) * T, op, "inp");
    return view(wte, size_t(max_token(tok, B, T) + 1) * C, op, "wte");
  }
};

// The stream a StreamScope gave this thread, and for which backend (as kernels/cuda).
thread_local const void* t_scope_owner = nullptr;
thread_local sim::Stream* t_scope_stream = nullptr;

// `--trace` on the simulated device: the CUDA backend's DeviceClock contract, so the
// timeline's device-time path (tickets, resolve, recycle) runs in CI. The compute stream
// has always finished, so a stamp on it is the host clock now; a stamp on a sim::Stream
// (the simulated NCCL's comm stream) is a closure queued there that reads the clock when
// the stream reaches it, as a CUDA event is.
class SimTraceClock final : public trace::DeviceClock {
 public:
  ~SimTraceClock() override { trace::forget_device_clock(this); }

  void set_origin() override {
    std::lock_guard<std::mutex> l(mu_);
    origin_ = Clock::now();
  }
  uint64_t stamp() override { return stamp_on(nullptr); }
  uint64_t stamp_on(void* stream) override {
    auto at = std::make_shared<Slot>();
    if (stream == nullptr) at->set(Clock::now());
    else static_cast<sim::Stream*>(stream)->enqueue([at] { at->set(Clock::now()); });  // shared: may run late
    std::lock_guard<std::mutex> l(mu_);
    slots_.push_back(std::move(at));
    return slots_.size() - 1;
  }
  double since_origin_us(uint64_t ticket) override {
    std::shared_ptr<Slot> at;
    Clock::time_point origin;
    {
      std::lock_guard<std::mutex> l(mu_);
      RZ_CHECK(ticket < slots_.size(), "trace: device stamp %llu was never taken", (unsigned long long)ticket);
      at = slots_[ticket];
      origin = origin_;
    }
    return std::chrono::duration<double, std::micro>(at->get() - origin).count();
  }
  void recycle() override {
    std::lock_guard<std::mutex> l(mu_);
    slots_.clear();
  }

 private:
  using Clock = std::chrono::steady_clock;
  // One stamp's time, set once (by the stream's thread when it reaches the stamp); a
  // stream runs every closure it was given, after an abort too, so get() returns.
  class Slot {
   public:
    void set(Clock::time_point t) {
      std::lock_guard<std::mutex> l(mu_);
      t_ = t;
      set_ = true;
      cv_.notify_all();
    }
    Clock::time_point get() {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return set_; });
      return t_;
    }

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    Clock::time_point t_;
    bool set_ = false;
  };
  std::mutex mu_;
  Clock::time_point origin_ = Clock::now();
  std::vector<std::shared_ptr<Slot>> slots_;  // by ticket, since the last recycle()
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(int index)
      : Backend(std::make_unique<SimOps<float>>(), std::make_unique<SimOps<bf16>>()), index_(index) {}
  ~SimBackend() override { clock_.reset(); }

  trace::DeviceClock* trace_clock() override { return clock_.get(); }

  Device device() const override { return Device{DeviceKind::sim, index_}; }
  std::string name() const override {
    return strfmt("sim:%d (simulated device: the CPU ops behind a guarded arena, %d OpenMP threads)", index_,
                  omp_get_max_threads());
  }
  bool driver_memory(size_t* used, size_t* total) override {
    *used = sim::device_bytes_in_use();
    *total = sim::device_capacity();
    return true;
  }

  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    sim::check_host(host_src, bytes, __func__, "host_src");
    cpu_backend().copy_from_host(DEV(static_cast<char*>(dst), bytes), host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    sim::check_host(host_dst, bytes, __func__, "host_dst");
    cpu_backend().copy_to_host(host_dst, DEV(static_cast<const char*>(src), bytes), bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    char* d = DEV(static_cast<char*>(dst), bytes);
    const char* s = DEV(static_cast<const char*>(src), bytes);
    on_op_stream([=] { std::memcpy(d, s, bytes); });
  }
  void zero(void* dst, size_t bytes) override {
    char* d = DEV(static_cast<char*>(dst), bytes);
    if (bytes > 0) on_op_stream([=] { std::memset(d, 0, bytes); });
  }
  void synchronize() override {}

  std::shared_ptr<void> mark(void* stream) override {
    if (stream == nullptr) return nullptr;  // the compute stream has always finished
    auto* s = static_cast<sim::Stream*>(stream);
    return std::make_shared<sim::StreamMark>(sim::StreamMark{s, s->record()});
  }
  void wait_for(const std::shared_ptr<void>& mark) override {
    if (mark != nullptr) static_cast<const sim::StreamMark*>(mark.get())->wait();
  }

  void f32_to_bf16(bf16* out, const float* in, size_t n) override { cpu_backend().f32_to_bf16(DEV(out, n), DEV(in, n), n); }
  void bf16_to_f32(float* out, const bf16* in, size_t n) override { cpu_backend().bf16_to_f32(DEV(out, n), DEV(in, n), n); }

  void accumulate_f32(float* dst, const float* src, size_t n, bool assign) override {
    float* d = DEV(dst, n);
    const float* s = DEV(src, n);
    on_op_stream([=] { cpu_backend().accumulate_f32(d, s, n, assign); });
  }
  void accumulate_f32(float* dst, const bf16* src, size_t n, bool assign) override {
    float* d = DEV(dst, n);
    const bf16* s = DEV(src, n);
    on_op_stream([=] { cpu_backend().accumulate_f32(d, s, n, assign); });
  }
  void accumulate_bf16(bf16* dst, const bf16* src, size_t n, bool assign) override {
    bf16* d = DEV(dst, n);
    const bf16* s = DEV(src, n);
    on_op_stream([=] { cpu_backend().accumulate_bf16(d, s, n, assign); });
  }
  double sum_squares(const float* x, size_t n) override { return cpu_backend().sum_squares(DEV(x, n), n); }
  double sum_squares(const bf16* x, size_t n) override { return cpu_backend().sum_squares(DEV(x, n), n); }

  void adamw_update(float* params, float* master, float* m, float* v, const float* grads, size_t n,
                    const AdamWStep& s) override {
    cpu_backend().adamw_update(DEV(params, n), DEV_OR_NULL(master, n), DEV(m, n), DEV(v, n), DEV(grads, n), n, s);
  }
  void adamw_update(bf16* params, float* master, float* m, float* v, const bf16* grads, size_t n,
                    const AdamWStep& s) override {
    cpu_backend().adamw_update(DEV(params, n), DEV(master, n), DEV(m, n), DEV(v, n), DEV(grads, n), n, s);
  }
  void adamw_update(bf16* params, float* master, float* m, float* v, const float* grads, size_t n,
                    const AdamWStep& s) override {
    cpu_backend().adamw_update(DEV(params, n), DEV(master, n), DEV(m, n), DEV(v, n), DEV(grads, n), n, s);
  }

 protected:
  void* set_thread_stream(void* stream) override {
    void* prev = t_scope_owner == this ? t_scope_stream : nullptr;
    t_scope_owner = this;
    t_scope_stream = static_cast<sim::Stream*>(stream);
    return prev;
  }

 private:
  // copy, zero and accumulate_*: queued on a StreamScope's stream, else run now.
  template <typename F>
  void on_op_stream(F&& work) {
    if (t_scope_owner == this && t_scope_stream != nullptr) t_scope_stream->enqueue(std::forward<F>(work));
    else work();
  }

  const int index_;
  std::unique_ptr<SimTraceClock> clock_ = std::make_unique<SimTraceClock>();
};

#undef DEV
#undef DEV_OR_NULL

}  // namespace

std::unique_ptr<Backend> make_sim_backend(int index) {
  RZ_CHECK(index >= 0 && index < sim::kDeviceCount, "device sim:%d: the simulated device has ordinals 0..%d", index,
           sim::kDeviceCount - 1);
  sim::register_allocator();  // Buffers on sim:K, as the CUDA backend registers cudaMalloc
  return std::make_unique<SimBackend>(index);
}

}  // namespace rz
