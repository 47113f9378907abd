// cli/step_profile.cpp
//
// Why a replay and not timers inside the model: model/gpt2.cpp stays free of profiling
// code, and the replay times exactly the ops (the backend's table, kernels/backend.h) a
// step calls. One layer's activations
// are allocated and reused for all L layers (each layer's calls are repeated L times), so
// the working set is one layer's instead of the model's: the split is a little kinder to
// the caches than the real step, whose total bench-step prints beside it.
#include "cli/step_profile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "base/bf16.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/memory.h"
#include "kernels/backend.h"
#include "kernels/cpu/convert.h"
#include "model/layout.h"

namespace rz {

namespace {

// Process CPU milliseconds (all threads) of a call (base/clock.h).
double cpu_ms() { return process_cpu_seconds() * 1e3; }

// Accumulates CPU milliseconds per (op, phase) within one replay.
struct OpClock {
  std::map<std::string, double> fwd, bwd;
  template <typename F>
  void time(const char* op, bool backward, F&& f) {
    const double t0 = cpu_ms();
    f();
    (backward ? bwd : fwd)[op] += cpu_ms() - t0;
  }
};

template <typename E>
struct Tensor {
  Buffer<E> buf;
  Tensor(size_t n, std::mt19937& rng, float stddev) : buf(MemTag::workspace, n) {
    std::normal_distribution<float> nd(0.0f, stddev > 0 ? stddev : 1.0f);
    for (size_t i = 0; i < n; ++i) buf.data()[i] = store<E>(acc_t<E>(stddev > 0 ? nd(rng) : 0.0f));
  }
  E* operator()() { return buf.data(); }
};

// Parameters of one layer plus the embeddings, their gradients, and one layer's
// activations (reused by every layer); allocated and filled once, replayed many times.
template <typename E>
struct StepReplay {
  using A = acc_t<E>;
  Backend& be;
  const GPT2Config cfg;
  const int B, T;
  const size_t N;
  std::mt19937 rng{1};
  Tensor<E> wte, wpe, lnw, lnb, qkvw, qkvb, attw, attb, fcw, fcb, fcpw, fcpb;
  Tensor<E> g_wte, g_wpe, g_lnw, g_lnb, g_qkvw, g_qkvb, g_attw, g_attb, g_fcw, g_fcb, g_fcpw, g_fcpb;
  Tensor<E> enc, ln, qkv, att, atty, res2, fch, fchg, res3, proj, logits, dres, dln, dfch, dqkv, datty;
  std::vector<A> mean, rstd, losses, lse;
  std::vector<int> x, y;

  StepReplay(Backend& be_, const GPT2Config& c, int B_, int T_)
      : be(be_), cfg(c), B(B_), T(T_), N(size_t(B_) * T_),
        wte(size_t(c.padded_vocab_size) * c.channels, rng, 0.02f), wpe(size_t(c.max_seq_len) * c.channels, rng, 0.02f),
        lnw(c.channels, rng, 0.0f), lnb(c.channels, rng, 0.0f),
        qkvw(size_t(3) * c.channels * c.channels, rng, 0.02f), qkvb(3 * c.channels, rng, 0.0f),
        attw(size_t(c.channels) * c.channels, rng, 0.02f), attb(c.channels, rng, 0.0f),
        fcw(size_t(4) * c.channels * c.channels, rng, 0.02f), fcb(4 * c.channels, rng, 0.0f),
        fcpw(size_t(4) * c.channels * c.channels, rng, 0.02f), fcpb(c.channels, rng, 0.0f),
        g_wte(size_t(c.padded_vocab_size) * c.channels, rng, 0.0f), g_wpe(size_t(c.max_seq_len) * c.channels, rng, 0.0f),
        g_lnw(c.channels, rng, 0.0f), g_lnb(c.channels, rng, 0.0f),
        g_qkvw(size_t(3) * c.channels * c.channels, rng, 0.0f), g_qkvb(3 * c.channels, rng, 0.0f),
        g_attw(size_t(c.channels) * c.channels, rng, 0.0f), g_attb(c.channels, rng, 0.0f),
        g_fcw(size_t(4) * c.channels * c.channels, rng, 0.0f), g_fcb(4 * c.channels, rng, 0.0f),
        g_fcpw(size_t(4) * c.channels * c.channels, rng, 0.0f), g_fcpb(c.channels, rng, 0.0f),
        enc(N * c.channels, rng, 1.0f), ln(N * c.channels, rng, 0.0f), qkv(N * 3 * c.channels, rng, 0.0f),
        att(size_t(B_) * c.num_heads * T_ * T_, rng, 0.0f), atty(N * c.channels, rng, 0.0f),
        res2(N * c.channels, rng, 0.0f), fch(N * 4 * c.channels, rng, 0.0f), fchg(N * 4 * c.channels, rng, 0.0f),
        res3(N * c.channels, rng, 0.0f), proj(N * c.channels, rng, 0.0f),
        logits(N * c.padded_vocab_size, rng, 0.0f), dres(N * c.channels, rng, 0.0f),
        dln(N * c.channels, rng, 0.0f), dfch(N * 4 * c.channels, rng, 0.0f), dqkv(N * 3 * c.channels, rng, 0.0f),
        datty(N * c.channels, rng, 0.0f), mean(N), rstd(N), losses(N), lse(N), x(N), y(N) {
    for (int i = 0; i < c.channels; ++i) lnw()[i] = store<E>(A(1));
    for (size_t i = 0; i < N; ++i) {
      x[i] = int((i * 7919) % size_t(c.vocab_size));
      y[i] = int((i * 104729 + 1) % size_t(c.vocab_size));
    }
  }
  void run(OpClock& clk);
};

template <typename E>
void StepReplay<E>::run(OpClock& clk) {
  Ops<E>& ops = be.ops<E>();
  const int L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, V = cfg.vocab_size,
            Vp = cfg.padded_vocab_size;
  auto zero = [&](E* p, size_t n) { be.zero(p, n * sizeof(E)); };

  clk.time("encoder", false, [&] { ops.encoder_forward(enc(), x.data(), wte(), wpe(), B, T, C); });
  for (int l = 0; l < L; ++l) {
    clk.time("layernorm", false, [&] { ops.layernorm_forward(ln(), mean.data(), rstd.data(), enc(), lnw(), lnb(), int(N), C); });
    clk.time("matmul", false, [&] { ops.matmul_forward(qkv(), ln(), qkvw(), qkvb(), int(N), C, 3 * C); });
    clk.time("attention", false, [&] { ops.attention_forward(atty(), att(), qkv(), B, T, C, NH, NH); });
    clk.time("matmul", false, [&] { ops.matmul_forward(proj(), atty(), attw(), attb(), int(N), C, C); });
    clk.time("residual", false, [&] { ops.residual_forward(res2(), enc(), proj(), N * C); });
    clk.time("layernorm", false, [&] { ops.layernorm_forward(ln(), mean.data(), rstd.data(), res2(), lnw(), lnb(), int(N), C); });
    clk.time("matmul", false, [&] { ops.matmul_forward(fch(), ln(), fcw(), fcb(), int(N), C, 4 * C); });
    clk.time("gelu", false, [&] { ops.gelu_forward(fchg(), fch(), N * 4 * C); });
    clk.time("matmul", false, [&] { ops.matmul_forward(proj(), fchg(), fcpw(), fcpb(), int(N), 4 * C, C); });
    clk.time("residual", false, [&] { ops.residual_forward(res3(), res2(), proj(), N * C); });
  }
  clk.time("layernorm", false, [&] { ops.layernorm_forward(ln(), mean.data(), rstd.data(), res3(), lnw(), lnb(), int(N), C); });
  clk.time("classifier", false, [&] { ops.matmul_forward(logits(), ln(), wte(), static_cast<const E*>(nullptr), int(N), C, Vp); });
  clk.time("crossentropy", false, [&] { ops.crossentropy_forward(losses.data(), lse.data(), logits(), y.data(), int(N), V, Vp); });

  clk.time("crossentropy", true, [&] {
    ops.crossentropy_softmax_backward(logits(), lse.data(), y.data(), A(1) / A(N), int(N), V, Vp);
  });
  clk.time("zero", true, [&] { zero(dln(), N * C); });
  clk.time("classifier", true, [&] {
    ops.matmul_backward(dln(), g_wte(), static_cast<E*>(nullptr), logits(), ln(), wte(), int(N), C, Vp);
  });
  clk.time("zero", true, [&] { zero(dres(), N * C); });
  clk.time("layernorm", true, [&] {
    ops.layernorm_backward(dres(), g_lnw(), g_lnb(), dln(), res3(), lnw(), mean.data(), rstd.data(), int(N), C);
  });
  for (int l = L - 1; l >= 0; --l) {
    clk.time("zero", true, [&] { zero(dfch(), N * 4 * C); });
    clk.time("matmul", true, [&] { ops.matmul_backward(dfch(), g_fcpw(), g_fcpb(), dres(), fchg(), fcpw(), int(N), 4 * C, C); });
    clk.time("gelu", true, [&] { ops.gelu_backward(dfch(), fch(), dfch(), N * 4 * C); });
    clk.time("zero", true, [&] { zero(dln(), N * C); });
    clk.time("matmul", true, [&] { ops.matmul_backward(dln(), g_fcw(), g_fcb(), dfch(), ln(), fcw(), int(N), C, 4 * C); });
    clk.time("layernorm", true, [&] {
      ops.layernorm_backward(dres(), g_lnw(), g_lnb(), dln(), res2(), lnw(), mean.data(), rstd.data(), int(N), C);
    });
    clk.time("zero", true, [&] { zero(datty(), N * C); });
    clk.time("matmul", true, [&] { ops.matmul_backward(datty(), g_attw(), g_attb(), dres(), atty(), attw(), int(N), C, C); });
    clk.time("zero", true, [&] { zero(dqkv(), N * 3 * C); });
    clk.time("attention", true, [&] { ops.attention_backward(dqkv(), datty(), qkv(), att(), B, T, C, NH, NH); });
    clk.time("zero", true, [&] { zero(dln(), N * C); });
    clk.time("matmul", true, [&] { ops.matmul_backward(dln(), g_qkvw(), g_qkvb(), dqkv(), ln(), qkvw(), int(N), C, 3 * C); });
    clk.time("layernorm", true, [&] {
      ops.layernorm_backward(dres(), g_lnw(), g_lnb(), dln(), enc(), lnw(), mean.data(), rstd.data(), int(N), C);
    });
  }
  clk.time("encoder", true, [&] { ops.encoder_backward(g_wte(), g_wpe(), dres(), x.data(), B, T, C); });
}

// AdamW over a parameter count like the model's, in the strategy's storage types.
template <typename E>
struct AdamWReplay {
  Backend& be;
  size_t n;
  Buffer<float> m, v, master;
  Buffer<E> p, g;
  AdamWReplay(Backend& be_, size_t nparams) : be(be_), n(nparams), m(MemTag::adam_m, n), v(MemTag::adam_v, n), p(MemTag::params, n), g(MemTag::grads, n) {
    std::memset(static_cast<void*>(m.data()), 0, n * sizeof(float));
    std::memset(static_cast<void*>(v.data()), 0, n * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
      p.data()[i] = store<E>(0.01f * float(i % 97));
      g.data()[i] = store<E>(0.001f * float(i % 13));
    }
    if constexpr (!std::is_same_v<E, float>) {
      master.allocate(MemTag::master, n);
      bf16_to_f32(master.data(), p.data(), n);
    }
  }
  void run(OpClock& clk) {
    AdamWStep st;
    st.weight_decay = 0.1f;
    float* mw = std::is_same_v<E, float> ? nullptr : master.data();
    clk.time("adamw", true, [&] { be.adamw_update(p.data(), mw, m.data(), v.data(), g.data(), n, st); });
  }
};

}  // namespace

std::vector<OpTime> profile_step_ops(Backend& be, const GPT2Config& cfg, Precision prec, int B, int T,
                                     int warmup, int steps) {
  RZ_CHECK(be.device().is_cpu(), "bench-step --ops: the kernel split replays host buffers, so it runs on the CPU only");
  std::vector<OpClock> runs;
  const size_t nparams = size_t(num_parameters(cfg));
  auto replay = [&](auto& step, auto& adamw) {
    for (int s = 0; s < warmup + steps; ++s) {
      OpClock clk;
      step.run(clk);
      adamw.run(clk);
      if (s >= warmup) runs.push_back(std::move(clk));
    }
  };
  if (prec == Precision::fp32) {
    StepReplay<float> step(be, cfg, B, T);
    AdamWReplay<float> adamw(be, nparams);
    replay(step, adamw);
  } else {
    StepReplay<bf16> step(be, cfg, B, T);
    AdamWReplay<bf16> adamw(be, nparams);
    replay(step, adamw);
  }
  auto median = [](std::vector<double> a) {
    std::sort(a.begin(), a.end());
    return a[a.size() / 2];
  };
  std::vector<OpTime> out;
  for (const char* op : {"matmul", "classifier", "attention", "layernorm", "gelu", "residual", "crossentropy",
                         "encoder", "zero", "adamw"}) {
    std::vector<double> f, b;
    for (OpClock& r : runs) {
      f.push_back(r.fwd[op]);
      b.push_back(r.bwd[op]);
    }
    out.push_back({op, median(f), median(b)});
  }
  return out;
}

}  // namespace rz
