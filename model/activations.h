// model/activations.h: what a forward keeps for its backward, carved out of one allocation
// (model.cpp's only; the memory planner reaches it through Model::activation_bytes).
//
// Per layer l (llm.c's names; shapes for N = B*T rows, Q = (NH + 2 NKV) hs the fused q|k|v
// width, F the MLP's first matmul's width (4C, or 2H for SwiGLU's gate|up), H its activation's
// width (4C, or H)):
//   ln1 (N,C), ln1_mean, ln1_rstd (N)   norm 1 of the block input (RMSNorm keeps no mean)
//   qkv (N,Q)                           after the rotation of q and k (rope families)
//   att (B,NH,T,T) or att_lse (B,NH,T)  attention's softmax, or its log-sum-exp (flash)
//   atty (N,C)
//   res2 = input + attproj(atty) (N,C)  (attproj itself is scratch)
//   ln2, ln2_mean, ln2_rstd             norm 2
//   fch (N,F), fch_act (N,H)            the MLP's matmul and its activation (scratch with
//                                       Recompute::gelu)
//   res3 = res2 + fcproj(fch_act) (N,C) the block output
// With Recompute::layer only res3 (the next block's input) is kept per layer: every other
// field of every layer points into one block's worth of scratch, which backward refills by
// running the block's forward again just before the block's backward.
#pragma once

#include <cstddef>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace rz::model_detail {

// Hands out 64-byte aligned pieces of one allocation; with base == nullptr it only counts.
struct Carver {
  unsigned char* base = nullptr;
  size_t used = 0;
  template <typename X>
  X* take(size_t n) {
    size_t off = (used + 63) / 64 * 64;
    used = off + n * sizeof(X);
    return base ? reinterpret_cast<X*>(base + off) : nullptr;
  }
};

template <typename E>
struct LayerActs {
  E *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fch_act, *res3;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;  // the means: layernorm only
  float* att_lse;  // (B, NH, T) with Attention::flash, in place of att
};

template <typename E>
struct Acts {
  E* encoded;  // (N, C)
  std::vector<LayerActs<E>> layers;
  E *lnf, *logits;  // (N, C), (N, Vp)
  float *lnf_mean, *lnf_rstd, *losses, *lse;  // (N) each
  int *inputs, *targets;  // (N) each: the batch's token ids in backend memory
  // (T, C) zeros, for families without learned positions: the encoder op adds a position
  // row, and adding 0 leaves the token embedding exact; in backward it takes the op's
  // (discarded) position gradient. Null where wpe exists.
  E* no_positions;
  // scratch shared by all layers
  E *proj, *act_scratch, *dres, *dln, *dfch, *dact, *dqkv, *datty;
};

template <typename E>
Acts<E> carve_acts(Carver& cv, const ModelConfig& cfg, const ModelOptions& opts, int B, int T) {
  using A = float;  // per-row statistics are fp32 in both precisions
  const FamilyTraits& tr = family_traits(cfg.family);
  const size_t N = size_t(B) * T, C = cfg.channels, NH = cfg.num_heads, Q = cfg.qkv_width(),
               F = cfg.fc_width(), H = cfg.intermediate;
  const bool act_scratch = opts.recompute == Recompute::gelu;
  const bool mean = tr.norm == NormKind::layernorm;
  // One layer's tensors; with keep_res3 == false all but res3.
  auto carve_layer = [&](LayerActs<E>& l, bool keep_res3) {
    l.ln1 = cv.take<E>(N * C);
    l.ln1_mean = mean ? cv.take<A>(N) : nullptr;
    l.ln1_rstd = cv.take<A>(N);
    l.qkv = cv.take<E>(N * Q);
    const bool flash = opts.attention == Attention::flash;
    l.att = flash ? nullptr : cv.take<E>(size_t(B) * NH * T * T);
    l.att_lse = flash ? cv.take<A>(size_t(B) * NH * T) : nullptr;
    l.atty = cv.take<E>(N * C);
    l.res2 = cv.take<E>(N * C);
    l.ln2 = cv.take<E>(N * C);
    l.ln2_mean = mean ? cv.take<A>(N) : nullptr;
    l.ln2_rstd = cv.take<A>(N);
    l.fch = cv.take<E>(N * F);
    l.fch_act = act_scratch ? nullptr : cv.take<E>(N * H);
    l.res3 = keep_res3 ? cv.take<E>(N * C) : nullptr;
  };
  Acts<E> a;
  a.encoded = cv.take<E>(N * C);
  a.layers.resize(cfg.num_layers);
  if (opts.recompute == Recompute::layer) {
    LayerActs<E> block{};  // (scratch) one block's worth, shared by every layer
    carve_layer(block, false);
    for (auto& l : a.layers) {
      l = block;
      l.res3 = cv.take<E>(N * C);  // kept: the input of the next block (or of lnf)
    }
  } else {
    for (auto& l : a.layers) carve_layer(l, true);
  }
  a.lnf = cv.take<E>(N * C);
  a.lnf_mean = mean ? cv.take<A>(N) : nullptr;
  a.lnf_rstd = cv.take<A>(N);
  a.logits = cv.take<E>(N * cfg.padded_vocab_size);
  a.losses = cv.take<A>(N);
  a.lse = cv.take<A>(N);
  a.no_positions = tr.position == PositionKind::learned ? nullptr : cv.take<E>(size_t(T) * C);
  a.proj = cv.take<E>(N * C);
  a.act_scratch = act_scratch ? cv.take<E>(N * H) : nullptr;
  a.dres = cv.take<E>(N * C);
  a.dln = cv.take<E>(N * C);
  a.dfch = cv.take<E>(N * F);
  // GELU's backward runs in place on its input's gradient; SwiGLU's halves the width.
  a.dact = tr.mlp == MlpKind::gelu ? a.dfch : cv.take<E>(N * H);
  a.dqkv = cv.take<E>(N * Q);
  a.datty = cv.take<E>(N * C);
  a.inputs = cv.take<int>(N);
  a.targets = cv.take<int>(N);
  return a;
}

inline size_t plan_bytes(const ModelConfig& cfg, const ModelOptions& opts, int B, int T) {
  Carver cv;
  if (opts.precision == Precision::fp32)
    carve_acts<float>(cv, cfg, opts, B, T);
  else
    carve_acts<bf16>(cv, cfg, opts, B, T);
  return cv.used;
}

}  // namespace rz::model_detail
