// model/model.cpp: the decoder-only transformer's forward and backward, orchestrating the
// backend's ops, for every family of model/family.h.
//
// One implementation, templated over the storage type E (float for fp32 mode, bf16 for
// bf16 mode), calling the op table Ops<E> of the model's backend (kernels/backend.h), so
// the same code runs on the CPU and on a GPU. Parameters live in one flat buffer in the
// layout's gradient-ready order (model/layout.h); activations in one tracked allocation
// carved as model/activations.h says, grown only when a forward asks for a larger (B, T)
// than any before it.
//
// A family enters in four places only, each asking its FamilyTraits row: the norm
// (layernorm or RMSNorm: norm_forward/norm_backward), the positions (wpe added by the
// encoder, or rope on q and k right after the qkv matmul), the MLP's activation (GELU or
// SwiGLU: mlp_forward/mlp_backward) and which tensors exist (biases, wpe, an untied
// lmhead), which the layout knows: param_or_null/grad_or_null give null for a tensor the
// family lacks, and every op takes a null bias as none.
//
// Backward walks the layers in reverse with one residual-gradient buffer dres: it enters
// a block as d(res3), becomes d(res2) after norm 2's backward adds its part, and leaves as
// d(input) after norm 1's. Each tensor's gradient storage comes from sink.grad_ptr, and the
// sink hears grads_ready right after each op that finishes a unit of grad_ready_ranges:
// an untied lmhead, lnf, then per layer fcproj, fc, ln2, attproj, qkv, ln1, then the
// embeddings. Sampling's forward_cached runs the same blocks over the new positions only,
// with one difference inside attention: k and v come from a per-layer cache (kv below)
// that the new positions' k and v rows are written into (kernels/cpu/attention_kv.h says
// why K and V are caches of their own rather than qkv rows).
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/check.h"
#include "base/memory.h"
#include "base/trace.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/gemm_alignment.h"
#include "model/activations.h"

namespace rz {

using model_detail::Acts;
using model_detail::Carver;
using model_detail::LayerActs;
using model_detail::carve_acts;
using model_detail::plan_bytes;

namespace {

// Box-Muller over a 64-bit Mersenne Twister: the same numbers on every platform
// (std::normal_distribution's algorithm is implementation-defined).
struct NormalRng {
  std::mt19937_64 gen;
  bool has_spare = false;
  double spare = 0;
  explicit NormalRng(uint64_t seed) : gen(seed) {}
  double uniform() { return (double(gen() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double next() {
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    double r = std::sqrt(-2.0 * std::log(uniform())), th = 2.0 * M_PI * uniform();
    spare = r * std::sin(th);
    has_spare = true;
    return r * std::cos(th);
  }
};

}  // namespace

struct Model::Impl {
  ModelConfig cfg;
  const FamilyTraits* traits = nullptr;  // family_traits(cfg.family)
  ModelOptions opts;
  ParamLayout layout;
  std::vector<std::pair<size_t, size_t>> ready_ranges;  // grad_ready_ranges(layout)
  std::shared_ptr<Backend> backend;  // ModelOptions::backend, or the shared cpu_backend()
  Buffer<unsigned char> params;  // layout.total elements of E, on the backend's device
  Buffer<unsigned char> acts;    // carved by carve_acts for (capB, capT), same device
  int capB = 0, capT = 0;        // activation capacity
  int B = 0, T = 0;              // shape of the last forward
  bool have_targets = false, logits_valid = false;
  int logit_rows = 0;            // rows of logits the last forward left: B*T, or 1 (forward_cached)
  // The KV cache (forward_cached): per layer l, K then V, (kv_rows, NKV*hs) each, on the device.
  Buffer<unsigned char> kv;
  int kv_rows = 0;    // positions it has room for (0: none reserved)
  int kv_filled = 0;  // positions 0 .. kv_filled - 1 hold the current sequence's k and v
  std::vector<int> host_inputs;  // (B*T) the last forward's token ids, on the host for encoder_backward
  std::vector<float> host_losses;  // (N) the last forward's losses, copied to the host

  // ZeRO-3 (set_param_gate): per unit, the gate's pointer while acquired, else null.
  ParamGate* gate = nullptr;
  std::vector<std::pair<size_t, size_t>> units;  // param_unit_ranges(layout)
  std::vector<const unsigned char*> unit_data;

  bool rope() const { return traits->position == PositionKind::rope; }
  int kv_width() const { return cfg.num_kv_heads * cfg.head_size(); }  // NKV*hs

  // A parameter tensor's storage, or null for a tensor the family does not have.
  template <typename E>
  E* param_or_null(ParamKind k, int layer = -1) {
    const ParamTensor* t = layout.find_if(k, layer);
    if (t == nullptr) return nullptr;
    if (gate) return gated_param<E>(*t);
    return reinterpret_cast<E*>(params.data()) + t->offset;
  }
  template <typename E>
  E* param(ParamKind k, int layer = -1) {
    E* p = param_or_null<E>(k, layer);
    RZ_CHECK(p != nullptr, "parameter layout has no tensor %s for layer %d", param_kind_name(k), layer);
    return p;
  }
  // The classifier's weight (Vp, C): wte when tied, else lmhead.
  template <typename E>
  E* classifier() {
    return param<E>(cfg.tied ? ParamKind::wte : ParamKind::lmhead);
  }
  template <typename E>
  E* gated_param(const ParamTensor& t) {
    const int u = param_unit_of(t, cfg.num_layers);
    RZ_CHECK(unit_data[u] != nullptr, "parameter %s read while its unit %d is not acquired", t.name.c_str(), u);
    return const_cast<E*>(reinterpret_cast<const E*>(unit_data[u])) + (t.offset - units[u].first);
  }
  void acquire(int unit, int next) {
    if (gate) unit_data[unit] = static_cast<const unsigned char*>(gate->acquire(unit, next));
  }
  void release(int unit) {
    if (!gate) return;
    gate->release(unit);
    unit_data[unit] = nullptr;
  }
  template <typename E>
  Acts<E> views() {
    Carver cv{acts.data(), 0};
    return carve_acts<E>(cv, cfg, opts, B, T);
  }
  template <typename E>
  E* grad_or_null(GradSink& sink, ParamKind k, int layer = -1) {
    const ParamTensor* t = layout.find_if(k, layer);
    if (t == nullptr) return nullptr;
    void* p = sink.grad_ptr(t->offset, t->numel);
    RZ_CHECK(p != nullptr, "GradSink returned no storage for %s", t->name.c_str());
    return static_cast<E*>(p);
  }
  template <typename E>
  E* grad(GradSink& sink, ParamKind k, int layer = -1) {
    E* p = grad_or_null<E>(sink, k, layer);
    RZ_CHECK(p != nullptr, "parameter layout has no tensor %s for layer %d", param_kind_name(k), layer);
    return p;
  }
  // Grows the activations to hold a forward of (B_, T_).
  void ensure_acts(int B_, int T_) {
    if (size_t(B_) * T_ > size_t(capB) * capT || T_ > capT || B_ > capB) {
      capB = std::max(capB, B_);
      capT = std::max(capT, T_);
      acts.allocate(MemTag::activations, plan_bytes(cfg, opts, capB, capT), opts.device);
    }
  }
  // Layer l's K (part 0) or V (part 1) cache, (kv_rows, NKV*hs).
  template <typename E>
  E* kv_cache(int l, int part) {
    return reinterpret_cast<E*>(kv.data()) + (size_t(2) * l + part) * kv_rows * size_t(kv_width());
  }

  // --- the family's parts (model/family.h), each asked of the traits row in one place
  // Norm n (ParamKind w, b of layer l) of inp (N, C) into out; mean (layernorm only) and rstd saved.
  template <typename E>
  void norm_forward(Ops<E>& op, E* out, float* mean, float* rstd, const E* inp, ParamKind w, ParamKind b, int l,
                    int N) {
    if (traits->norm == NormKind::rmsnorm)
      op.rmsnorm_forward(out, rstd, inp, param<E>(w, l), N, cfg.channels, float(cfg.norm_eps));
    else
      op.layernorm_forward(out, mean, rstd, inp, param<E>(w, l), param<E>(b, l), N, cfg.channels);
  }
  // dinp and the norm's parameter gradients accumulate.
  template <typename E>
  void norm_backward(Ops<E>& op, GradSink& sink, E* dinp, const E* dout, const E* inp, const float* mean,
                     const float* rstd, ParamKind w, ParamKind b, int l, int N) {
    if (traits->norm == NormKind::rmsnorm)
      op.rmsnorm_backward(dinp, grad<E>(sink, w, l), dout, inp, param<E>(w, l), rstd, N, cfg.channels);
    else
      op.layernorm_backward(dinp, grad<E>(sink, w, l), grad<E>(sink, b, l), dout, inp, param<E>(w, l), mean, rstd,
                            N, cfg.channels);
  }
  // The MLP's activation: fch (N, F) -> out (N, H).
  template <typename E>
  void mlp_forward(Ops<E>& op, E* out, const E* fch, size_t N) {
    if (traits->mlp == MlpKind::swiglu)
      op.swiglu_forward(out, fch, int(N), cfg.intermediate);
    else
      op.gelu_forward(out, fch, N * size_t(cfg.intermediate));
  }
  // dfch (N, F) = the activation's backward of dact (N, H) at fch; assigned (may alias dact for GELU).
  template <typename E>
  void mlp_backward(Ops<E>& op, E* dfch, const E* dact, const E* fch, size_t N) {
    if (traits->mlp == MlpKind::swiglu)
      op.swiglu_backward(dfch, dact, fch, int(N), cfg.intermediate);
    else
      op.gelu_backward(dfch, fch, dact, N * size_t(cfg.intermediate));
  }
  // The token embedding (and the learned positions where the family has them) of inputs at
  // positions pos .. pos + T - 1.
  template <typename E>
  void embed(Ops<E>& op, Acts<E>& a, int B_, int T_, int pos) {
    const int C = cfg.channels;
    if (a.no_positions != nullptr) {
      backend->zero(a.no_positions, size_t(T_) * C * sizeof(E));
      op.encoder_forward(a.encoded, a.inputs, param<E>(ParamKind::wte), a.no_positions, B_, T_, C);
    } else {
      op.encoder_forward(a.encoded, a.inputs, param<E>(ParamKind::wte), param<E>(ParamKind::wpe) + size_t(pos) * C, B_,
                         T_, C);
    }
  }

  template <typename E>
  float forward(const int* in, const int* tg, int B_, int T_);
  template <typename E>
  void forward_cached(const int* in, int n, int pos);
  // kv_pos >= 0: the cached forward of positions kv_pos .. kv_pos + T - 1 (B = 1).
  template <typename E>
  void block_forward(Acts<E>& a, int l, bool with_output, int kv_pos = -1);
  template <typename E>
  void attention_cached(Acts<E>& a, int l, int kv_pos);
  template <typename E>
  void backward(GradSink& sink, float loss_scale);
};

template <typename E>
float Model::Impl::forward(const int* in, const int* tg, int B_, int T_) {
  const int L = cfg.num_layers, C = cfg.channels, V = cfg.vocab_size,
            Vp = cfg.padded_vocab_size;
  RZ_CHECK(B_ >= 1 && T_ >= 1, "forward: batch shape must be positive, found B=%d T=%d", B_, T_);
  RZ_CHECK(T_ <= cfg.max_seq_len, "forward: sequence length T=%d exceeds the model's maxT=%d", T_,
           cfg.max_seq_len);
  const size_t N = size_t(B_) * T_;
  for (size_t i = 0; i < N; ++i) {
    RZ_CHECK(in[i] >= 0 && in[i] < V, "forward: input token %d at position %zu is outside [0, %d)",
             in[i], i, V);
    RZ_CHECK(!tg || (tg[i] >= 0 && tg[i] < V),
             "forward: target token %d at position %zu is outside [0, %d)", tg[i], i, V);
  }
  ensure_acts(B_, T_);
  RZ_CHECK(gate || !params.empty(), "forward: the model has no parameters (its ZeRO-3 gate was detached)");
  B = B_;
  T = T_;
  have_targets = tg != nullptr;
  logit_rows = int(N);
  kv_filled = 0;  // training goes on: the parameters the cache was made with are about to change
  Acts<E> a = views<E>();
  Backend& be = *backend;
  Ops<E>& op = be.ops<E>();
  be.copy_from_host(a.inputs, in, N * sizeof(int));
  host_inputs.assign(in, in + N);
  if (tg) be.copy_from_host(a.targets, tg, N * sizeof(int));

  // ZeRO-3 units (no-ops without a gate): the embeddings stay acquired from the encoder to
  // the tied classifier (an untied model lets them go after the encoder); each layer, then
  // the model's end (lnf, lmhead), is acquired around its own use.
  acquire(L + 1, L > 0 ? 0 : L);
  embed(op, a, B, T, 0);
  if (!cfg.tied) release(L + 1);
  for (int l = 0; l < L; ++l) {
    RZ_TRACE_SCOPE("forward layer", l);
    acquire(l, l + 1 < L ? l + 1 : L);
    block_forward(a, l, true);
    release(l);
  }
  acquire(L, -1);
  norm_forward(op, a.lnf, a.lnf_mean, a.lnf_rstd, a.layers[L - 1].res3, ParamKind::lnfw, ParamKind::lnfb, -1, int(N));
  op.matmul_forward(a.logits, a.lnf, classifier<E>(), static_cast<const E*>(nullptr), int(N), C, Vp);
  release(L);
  if (cfg.tied) release(L + 1);
  logits_valid = true;
  if (!tg) return 0.0f;
  // The op reads the targets from backend memory (copied above), and the per-position
  // losses are backend memory too: their mean is taken on the host over a copy.
  op.crossentropy_forward(a.losses, a.lse, a.logits, a.targets, int(N), V, Vp);
  host_losses.resize(N);
  be.copy_to_host(host_losses.data(), a.losses, N * sizeof(float));
  double sum = 0;
  for (float l : host_losses) sum += l;
  return float(sum / double(N));
}

// The forward of forward_cached (model.h): B = 1, T = n positions starting at pos. The
// encoder reads wpe from row pos (learned positions; rope rotates at pos .. pos + n - 1
// instead); every block writes its k and v into the cache and attends to it (block_forward's
// kv_pos); only the last position goes through lnf and the classifier, the one row sampling
// draws from. ZeRO-3's units are acquired in forward's order, so every rank that samples
// makes the same collectives.
template <typename E>
void Model::Impl::forward_cached(const int* in, int n, int pos) {
  const int L = cfg.num_layers, C = cfg.channels, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  RZ_CHECK(kv_rows > 0, "forward_cached: no KV cache (reserve_kv_cache first)");
  RZ_CHECK(n >= 1 && pos >= 0 && pos <= kv_filled && n <= kv_rows - pos,
           "forward_cached: positions %d .. %d, but the cache holds %d of room for %d", pos, pos + n - 1, kv_filled,
           kv_rows);
  for (int i = 0; i < n; ++i)
    RZ_CHECK(in[i] >= 0 && in[i] < V, "forward_cached: input token %d at position %d is outside [0, %d)", in[i],
             pos + i, V);
  ensure_acts(1, n);
  RZ_CHECK(gate || !params.empty(), "forward_cached: the model has no parameters (its ZeRO-3 gate was detached)");
  B = 1;
  T = n;
  have_targets = false;
  logit_rows = 1;
  kv_filled = pos;  // until the new positions are in (an error below leaves them out)
  Acts<E> a = views<E>();
  Backend& be = *backend;
  Ops<E>& op = be.ops<E>();
  be.copy_from_host(a.inputs, in, size_t(n) * sizeof(int));
  acquire(L + 1, L > 0 ? 0 : L);
  embed(op, a, 1, n, pos);
  if (!cfg.tied) release(L + 1);
  for (int l = 0; l < L; ++l) {
    RZ_TRACE_SCOPE("forward layer (cached)", l);
    acquire(l, l + 1 < L ? l + 1 : L);
    block_forward(a, l, true, pos);
    release(l);
  }
  acquire(L, -1);
  const E* last = a.layers[L - 1].res3 + size_t(n - 1) * C;  // (1, C)
  norm_forward(op, a.lnf, a.lnf_mean, a.lnf_rstd, last, ParamKind::lnfw, ParamKind::lnfb, -1, 1);
  op.matmul_forward(a.logits, a.lnf, classifier<E>(), static_cast<const E*>(nullptr), 1, C, Vp);
  release(L);
  if (cfg.tied) release(L + 1);
  kv_filled = pos + n;
  logits_valid = true;
}

// Attention of the cached forward: the new positions' q, k and v, k and v written into the
// cache rows kv_pos .. kv_pos + T - 1, then the new queries against every cached row.
template <typename E>
void Model::Impl::attention_cached(Acts<E>& a, int l, int kv_pos) {
  const int C = cfg.channels, NH = cfg.num_heads, NKV = cfg.num_kv_heads, hs = cfg.head_size(), KV = kv_width(),
            Q = cfg.qkv_width();
  const size_t N = size_t(T);
  Backend& be = *backend;
  Ops<E>& op = be.ops<E>();
  LayerActs<E>& la = a.layers[l];
  const E* w = param<E>(ParamKind::qkvw, l);
  const E* bias = param_or_null<E>(ParamKind::qkvb, l);
  E* k = kv_cache<E>(l, 0);
  E* v = kv_cache<E>(l, 1);
  const size_t at = size_t(kv_pos) * KV;
  const E* q = la.qkv;
  if (!rope()) {
    // The qkv weight's three row blocks (C, KV and KV rows) as three matmuls: q into
    // la.qkv's first N*C, k and v straight into the cache rows of the new positions.
    op.matmul_forward(la.qkv, la.ln1, w, bias, int(N), C, C);
    op.matmul_forward(k + at, la.ln1, w + size_t(C) * C, bias ? bias + C : nullptr, int(N), C, KV);
    op.matmul_forward(v + at, la.ln1, w + size_t(C + KV) * C, bias ? bias + C + KV : nullptr, int(N), C, KV);
  } else {
    // The rotation works on whole qkv rows (its op's layout), at the absolute positions: one
    // fused matmul, rope from kv_pos, then each row's q part into contiguous queries (dln:
    // backward's scratch, free while sampling) and its k and v parts into the cache.
    op.matmul_forward(la.qkv, la.ln1, w, bias, int(N), C, Q);
    op.rope_forward(la.qkv, 1, int(N), NH, NKV, hs, kv_pos, float(cfg.rope_theta));
    E* qrows = a.dln;  // (N, C)
    for (size_t t = 0; t < N; ++t) {
      const E* row = la.qkv + t * Q;
      be.copy(qrows + t * C, row, size_t(C) * sizeof(E));
      be.copy(k + at + t * KV, row + C, size_t(KV) * sizeof(E));
      be.copy(v + at + t * KV, row + C + KV, size_t(KV) * sizeof(E));
    }
    q = qrows;
  }
  op.attention_forward_kv(la.atty, q, k, v, 1, int(N), kv_pos, kv_rows, NH, NKV, hs);
}

// Block l's forward from its input (layer l-1's res3, or the embedding) into a.layers[l].
// The forward calls it with with_output; Recompute::layer's backward calls it again
// without, stopping after the MLP's activation: backward needs everything but res3, which
// is kept.
template <typename E>
void Model::Impl::block_forward(Acts<E>& a, int l, bool with_output, int kv_pos) {
  const int C = cfg.channels, NH = cfg.num_heads, NKV = cfg.num_kv_heads, H = cfg.intermediate;
  const size_t N = size_t(B) * T;
  Ops<E>& op = backend->ops<E>();
  LayerActs<E>& la = a.layers[l];
  const E* res_in = l == 0 ? a.encoded : a.layers[l - 1].res3;
  E* act_out = opts.recompute == Recompute::gelu ? a.act_scratch : la.fch_act;
  norm_forward(op, la.ln1, la.ln1_mean, la.ln1_rstd, res_in, ParamKind::ln1w, ParamKind::ln1b, l, int(N));
  if (kv_pos >= 0) {
    attention_cached(a, l, kv_pos);
  } else {
    op.matmul_forward(la.qkv, la.ln1, param<E>(ParamKind::qkvw, l), param_or_null<E>(ParamKind::qkvb, l), int(N), C,
                      cfg.qkv_width());
    if (rope()) op.rope_forward(la.qkv, B, T, NH, NKV, cfg.head_size(), 0, float(cfg.rope_theta));
    if (opts.attention == Attention::flash)
      op.attention_forward_flash(la.atty, la.att_lse, la.qkv, B, T, C, NH, NKV);
    else
      op.attention_forward(la.atty, la.att, la.qkv, B, T, C, NH, NKV);
  }
  op.matmul_forward(a.proj, la.atty, param<E>(ParamKind::attprojw, l), param_or_null<E>(ParamKind::attprojb, l),
                    int(N), C, C);
  op.residual_forward(la.res2, res_in, a.proj, N * C);
  norm_forward(op, la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, ParamKind::ln2w, ParamKind::ln2b, l, int(N));
  op.matmul_forward(la.fch, la.ln2, param<E>(ParamKind::fcw, l), param_or_null<E>(ParamKind::fcb, l), int(N), C,
                    cfg.fc_width());
  mlp_forward(op, act_out, la.fch, N);
  if (!with_output) return;
  op.matmul_forward(a.proj, act_out, param<E>(ParamKind::fcprojw, l), param_or_null<E>(ParamKind::fcprojb, l),
                    int(N), H, C);
  op.residual_forward(la.res3, la.res2, a.proj, N * C);
}

template <typename E>
void Model::Impl::backward(GradSink& sink, float loss_scale) {
  RZ_CHECK(B > 0 && have_targets, "backward: needs a forward with targets first");
  RZ_CHECK(logits_valid, "backward: called twice after one forward (the logits became dlogits)");
  const int L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, NKV = cfg.num_kv_heads, V = cfg.vocab_size,
            Vp = cfg.padded_vocab_size, H = cfg.intermediate, F = cfg.fc_width(), Q = cfg.qkv_width();
  const size_t N = size_t(B) * T;
  Acts<E> a = views<E>();
  Backend& be = *backend;
  Ops<E>& op = be.ops<E>();
  auto zero = [&be](E* p, size_t n) { be.zero(p, n * sizeof(E)); };

  // Gradients are reported final op by op, in the units of grad_ready_ranges().
  const std::vector<std::pair<size_t, size_t>>& ready = ready_ranges;
  size_t next_ready = 0;
  auto report_ready = [&] {
    sink.grads_ready(ready[next_ready].first, ready[next_ready].second);
    ++next_ready;
  };

  sink.begin_backward();
  // A tied classifier's dwte is requested now and written again by the encoder at the end;
  // an untied lmhead's gradient is final right after the classifier's backward.
  E* dwte = cfg.tied ? grad<E>(sink, ParamKind::wte) : nullptr;
  E* dclassifier = cfg.tied ? dwte : grad<E>(sink, ParamKind::lmhead);
  op.crossentropy_softmax_backward(a.logits, a.lse, a.targets, loss_scale / float(N), int(N), V, Vp);
  logits_valid = false;
  zero(a.dln, N * C);
  // ZeRO-3: the classifier is in the embeddings' unit when tied (only it reads wte in
  // backward), else in the model's end with lnf.
  acquire(cfg.tied ? L + 1 : L, cfg.tied ? L : L - 1);
  op.matmul_backward(a.dln, dclassifier, static_cast<E*>(nullptr), a.logits, a.lnf, classifier<E>(), int(N), C, Vp);
  if (cfg.tied) {
    release(L + 1);
    acquire(L, L - 1);
  } else {
    report_ready();  // lmhead
  }
  zero(a.dres, N * C);
  norm_backward(op, sink, a.dres, a.dln, a.layers[L - 1].res3, a.lnf_mean, a.lnf_rstd, ParamKind::lnfw,
                ParamKind::lnfb, -1, int(N));
  release(L);
  report_ready();  // lnf

  for (int l = L - 1; l >= 0; --l) {
    RZ_TRACE_SCOPE("backward layer", l);
    acquire(l, l - 1);
    if (opts.recompute == Recompute::layer) {
      RZ_TRACE_SCOPE("recompute layer", l);
      block_forward(a, l, false);
    }
    LayerActs<E>& la = a.layers[l];
    const E* res_in = l == 0 ? a.encoded : a.layers[l - 1].res3;
    const E* act_out = la.fch_act;
    if (opts.recompute == Recompute::gelu) {
      mlp_forward(op, a.act_scratch, la.fch, N);
      act_out = a.act_scratch;
    }
    // MLP: dres holds d(res3), which is also d(fcproj output).
    zero(a.dact, N * H);
    op.matmul_backward(a.dact, grad<E>(sink, ParamKind::fcprojw, l), grad_or_null<E>(sink, ParamKind::fcprojb, l),
                       a.dres, act_out, param<E>(ParamKind::fcprojw, l), int(N), H, C);
    report_ready();  // fcproj
    mlp_backward(op, a.dfch, a.dact, la.fch, N);
    zero(a.dln, N * C);
    op.matmul_backward(a.dln, grad<E>(sink, ParamKind::fcw, l), grad_or_null<E>(sink, ParamKind::fcb, l), a.dfch,
                       la.ln2, param<E>(ParamKind::fcw, l), int(N), C, F);
    report_ready();  // fc
    norm_backward(op, sink, a.dres, a.dln, la.res2, la.ln2_mean, la.ln2_rstd, ParamKind::ln2w, ParamKind::ln2b, l,
                  int(N));
    report_ready();  // ln2
    // Attention: dres now holds d(res2), which is also d(attproj output).
    zero(a.datty, N * C);
    op.matmul_backward(a.datty, grad<E>(sink, ParamKind::attprojw, l), grad_or_null<E>(sink, ParamKind::attprojb, l),
                       a.dres, la.atty, param<E>(ParamKind::attprojw, l), int(N), C, C);
    report_ready();  // attproj
    zero(a.dqkv, N * Q);
    if (opts.attention == Attention::flash)
      op.attention_backward_flash(a.dqkv, a.datty, la.qkv, la.att_lse, B, T, C, NH, NKV);
    else
      op.attention_backward(a.dqkv, a.datty, la.qkv, la.att, B, T, C, NH, NKV);
    // The gradient with respect to q and k before their rotation.
    if (rope()) op.rope_backward(a.dqkv, B, T, NH, NKV, cfg.head_size(), 0, float(cfg.rope_theta));
    zero(a.dln, N * C);
    op.matmul_backward(a.dln, grad<E>(sink, ParamKind::qkvw, l), grad_or_null<E>(sink, ParamKind::qkvb, l), a.dqkv,
                       la.ln1, param<E>(ParamKind::qkvw, l), int(N), C, Q);
    report_ready();  // qkv
    norm_backward(op, sink, a.dres, a.dln, res_in, la.ln1_mean, la.ln1_rstd, ParamKind::ln1w, ParamKind::ln1b, l,
                  int(N));
    release(l);
    report_ready();  // ln1
  }

  // The embeddings. Without learned positions the op's position gradient lands in the
  // forward's zero rows (scratch now) and is dropped.
  if (dwte == nullptr) dwte = grad<E>(sink, ParamKind::wte);
  E* dwpe = a.no_positions != nullptr ? a.no_positions : grad<E>(sink, ParamKind::wpe);
  op.encoder_backward(dwte, dwpe, a.dres, host_inputs.data(), B, T, C);
  report_ready();  // wte (and wpe)
  RZ_ENFORCE_EQ(next_ready, ready.size());
  sink.end_backward();
}

Model::Model(const ModelConfig& cfg, const ModelOptions& opts) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = cfg;
  finalize_config(impl_->cfg);
  impl_->traits = &family_traits(impl_->cfg.family);
  impl_->opts = opts;
  impl_->layout = build_param_layout(impl_->cfg);
  // On a device every tensor offset (a multiple of C) must be 16-byte aligned, the alignment
  // its GEMMs are planned for (kernels/gemm_alignment.h).
  const size_t C_bytes = size_t(impl_->cfg.channels) * precision_bytes(opts.precision);
  RZ_CHECK(opts.device.is_cpu() || C_bytes % kGemmAlignBytes == 0,
           "device %s: channels C = %d are %zu bytes in %s, not a multiple of %u, so the parameters and gradients "
           "would sit off the 16-byte grid cuBLASLt is planned for; use C a multiple of 8",
           device_name(opts.device).c_str(), impl_->cfg.channels, C_bytes, precision_name(opts.precision),
           unsigned(kGemmAlignBytes));
  impl_->ready_ranges = grad_ready_ranges(impl_->layout);
  RZ_CHECK(opts.backend != nullptr || opts.device.is_cpu(),
           "model on device %s: no backend given (ModelOptions::backend: the rank's, from train/rank_setup.h's "
           "place_rank)", device_name(opts.device).c_str());
  // Null on the host: cpu_backend(), which lives as long as the process (not owned here).
  impl_->backend = opts.backend != nullptr ? opts.backend : std::shared_ptr<Backend>(std::shared_ptr<Backend>(), &cpu_backend());
  RZ_CHECK(impl_->backend->device() == opts.device, "model on device %s: its backend is on %s",
           device_name(opts.device).c_str(), device_name(impl_->backend->device()).c_str());
  const size_t param_bytes = impl_->layout.total * precision_bytes(opts.precision);
  if (opts.shared_params && opts.device.is_cpu()) impl_->params.allocate_shared(MemTag::params, param_bytes);
  else impl_->params.allocate(MemTag::params, param_bytes, opts.device);
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
const ParamLayout& Model::layout() const { return impl_->layout; }
Precision Model::precision() const { return impl_->opts.precision; }
Device Model::device() const { return impl_->opts.device; }
Backend& Model::backend() { return *impl_->backend; }
Recompute Model::recompute() const { return impl_->opts.recompute; }
size_t Model::activation_capacity_bytes() const {
  return impl_->capB == 0 ? 0 : plan_bytes(impl_->cfg, impl_->opts, impl_->capB, impl_->capT);
}
void* Model::params() { return impl_->params.data(); }
const void* Model::params() const { return impl_->params.data(); }

// n elements of the model's precision in backend memory -> fp32 on the host.
static void stored_to_host_f32(Backend& be, Precision p, float* out, const void* src, size_t n) {
  if (p == Precision::fp32) {
    be.copy_to_host(out, src, n * sizeof(float));
  } else if (be.device().is_cpu()) {
    be.bf16_to_f32(out, static_cast<const bf16*>(src), n);
  } else {
    std::vector<bf16> host(n);
    be.copy_to_host(host.data(), src, n * sizeof(bf16));
    cpu_backend().bf16_to_f32(out, host.data(), n);
  }
}

void Model::set_param_gate(ParamGate* gate) {
  Impl& m = *impl_;
  m.gate = gate;
  m.kv_filled = 0;
  if (gate == nullptr) return;
  m.units = param_unit_ranges(m.layout, m.cfg.num_layers);
  m.unit_data.assign(m.units.size(), nullptr);
  m.params.release();
}

static void check_resident(const ParamGate* gate, const char* what) {
  RZ_CHECK(gate == nullptr, "%s: the parameters are sharded (ZeRO-3); the strategy holds them", what);
}

void Model::get_params_f32(float* out) const { get_params_f32(0, impl_->layout.total, out); }

void Model::set_params_f32(const float* in) { set_params_f32(0, impl_->layout.total, in); }

void Model::get_params_f32(size_t begin, size_t n, float* out) const {
  check_resident(impl_->gate, "get_params_f32");
  RZ_CHECK(begin <= impl_->layout.total && n <= impl_->layout.total - begin,
           "get_params_f32: [%zu, +%zu) outside the %zu parameters", begin, n, impl_->layout.total);
  const auto* src = static_cast<const unsigned char*>(impl_->params.data()) + begin * precision_bytes(precision());
  stored_to_host_f32(*impl_->backend, precision(), out, src, n);
}

void Model::set_params_f32(size_t begin, size_t n, const float* in) {
  check_resident(impl_->gate, "set_params_f32");
  impl_->kv_filled = 0;  // the cached k and v were made with the old parameters
  RZ_CHECK(begin <= impl_->layout.total && n <= impl_->layout.total - begin,
           "set_params_f32: [%zu, +%zu) outside the %zu parameters", begin, n, impl_->layout.total);
  Backend& be = *impl_->backend;
  void* dst = static_cast<unsigned char*>(impl_->params.data()) + begin * precision_bytes(precision());
  if (precision() == Precision::fp32) {
    be.copy_from_host(dst, in, n * sizeof(float));
  } else if (be.device().is_cpu()) {
    be.f32_to_bf16(static_cast<bf16*>(dst), in, n);
  } else {
    std::vector<bf16> host(n);
    cpu_backend().f32_to_bf16(host.data(), in, n);
    be.copy_from_host(dst, host.data(), n * sizeof(bf16));
  }
}

void Model::init_random(uint64_t seed) {
  check_resident(impl_->gate, "init_random");
  const ModelConfig& cfg = impl_->cfg;
  // Tensor by tensor in layout order (the RNG's order), a chunk at a time: no full-size
  // fp32 array next to the parameters.
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<float> chunk(kChunk);
  NormalRng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * cfg.num_layers);
  for (const ParamTensor& t : impl_->layout.tensors) {
    for (size_t at = 0; at < t.numel; at += kChunk) {
      const size_t n = std::min(kChunk, t.numel - at);
      for (size_t j = 0; j < n; ++j) {
        const size_t i = at + j;
        float x = 0.0f;  // biases, and wte's padded rows V..Vp-1
        switch (t.kind) {
          case ParamKind::ln1w: case ParamKind::ln2w: case ParamKind::lnfw:
            x = 1.0f;
            break;
          case ParamKind::wte: case ParamKind::lmhead:
            if (i < size_t(cfg.vocab_size) * cfg.channels) x = float(0.02 * rng.next());
            break;
          case ParamKind::attprojw: case ParamKind::fcprojw:
            x = float(residual_std * rng.next());
            break;
          case ParamKind::wpe: case ParamKind::qkvw: case ParamKind::fcw:
            x = float(0.02 * rng.next());
            break;
          default:
            break;
        }
        chunk[j] = x;
      }
      set_params_f32(t.offset + at, n, chunk.data());
    }
  }
}

float Model::forward(const int* inputs, const int* targets, int B, int T) {
  return precision() == Precision::fp32 ? impl_->forward<float>(inputs, targets, B, T)
                                        : impl_->forward<bf16>(inputs, targets, B, T);
}

void Model::backward(GradSink& sink, float loss_scale) {
  if (precision() == Precision::fp32)
    impl_->backward<float>(sink, loss_scale);
  else
    impl_->backward<bf16>(sink, loss_scale);
}

const std::vector<float>& Model::position_losses() const {
  RZ_CHECK(impl_->have_targets, "position_losses: the last forward had no targets");
  return impl_->host_losses;
}

void Model::reserve_kv_cache(int positions) {
  Impl& m = *impl_;
  RZ_CHECK(positions >= 1 && positions <= m.cfg.max_seq_len,
           "reserve_kv_cache: %d positions, expected 1 .. the model's maxT %d", positions, m.cfg.max_seq_len);
  m.kv_filled = 0;
  if (positions == m.kv_rows) return;
  m.kv.release();
  m.kv_rows = 0;
  m.kv.allocate(MemTag::activations,
                size_t(2) * m.cfg.num_layers * positions * m.kv_width() * precision_bytes(precision()), m.opts.device);
  m.kv_rows = positions;
}

void Model::release_kv_cache() {
  impl_->kv.release();
  impl_->kv_rows = impl_->kv_filled = 0;
}

void Model::forward_cached(const int* tokens, int n, int pos) {
  if (precision() == Precision::fp32)
    impl_->forward_cached<float>(tokens, n, pos);
  else
    impl_->forward_cached<bf16>(tokens, n, pos);
}

int Model::kv_cached_positions() const { return impl_->kv_filled; }

void Model::logits_f32(std::vector<float>& out) const {
  RZ_CHECK(impl_->B > 0 && impl_->logits_valid,
           "logits_f32: no logits (run forward; backward overwrites them with their gradients)");
  Impl& m = *impl_;
  const size_t n = size_t(m.logit_rows) * m.cfg.padded_vocab_size;
  out.resize(n);
  const void* logits = precision() == Precision::fp32 ? static_cast<const void*>(m.views<float>().logits)
                                                      : static_cast<const void*>(m.views<bf16>().logits);
  stored_to_host_f32(*m.backend, precision(), out.data(), logits, n);
}

size_t Model::activation_bytes(const ModelConfig& cfg, const ModelOptions& opts, int B, int T) {
  ModelConfig c = cfg;
  finalize_config(c);
  return plan_bytes(c, opts, B, T);
}

}  // namespace rz
