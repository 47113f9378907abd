// model/layout.h: the flat parameter buffer, in gradient-ready order.
//
// All parameters live in one flat buffer. Its order is the order in which backward
// finishes their gradients, so a bucket (a contiguous range) becomes ready as a whole:
//   lnfw, lnfb,
//   for l = L-1 .. 0: fcprojw, fcprojb, fcw, fcb, ln2w, ln2b, attprojw, attprojb,
//                     qkvw, qkvb, ln1w, ln1b
//   wpe, wte
// wte comes last: as the tied classifier it receives gradient at the very start of
// backward, and as the token embedding at the very end. llm.c's checkpoint order
// (wte, wpe, ln1w[L], ln1b[L], qkvw[L], ...) is converted to and from this one on I/O.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace rz {

enum class ParamKind : int {
  wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb,
  lnfw, lnfb
};
constexpr int kNumParamKinds = 16;
const char* param_kind_name(ParamKind k);  // "wte", "ln1w", ...

struct ParamTensor {
  ParamKind kind;
  int layer;                  // 0..L-1 for per-layer tensors, -1 otherwise
  std::string name;           // "wte", "h3.qkvw", "lnfw"
  size_t offset;              // first element in the flat buffer
  size_t numel;
  std::vector<size_t> shape;  // row-major, as llm.c: qkvw (3C, C), fcw (4C, C), wte (Vp, C)
  bool weight_decay;          // AdamW decays matrices and embeddings, not biases or layernorm
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;  // in flat-buffer (gradient-ready) order
  size_t total = 0;                  // elements
  const ParamTensor& find(ParamKind kind, int layer = -1) const;  // throws if absent
};

ParamLayout build_param_layout(const GPT2Config& cfg);

// The units in which backward reports gradients final (GradSink::grads_ready), in order.
// Every op that produces parameter gradients produces exactly two consecutive tensors of
// the layout -- a (weight, bias) pair of a matmul or layernorm, or at the end (wpe, wte),
// which the encoder backward finishes together -- so the units are tensors (2i, 2i+1):
// lnf, then per layer fcproj, fc, ln2, attproj, qkv, ln1, then the embeddings. A pair's
// gradient is final right after its op's backward; the strategies size their staging
// pools from these units (zero/buckets.h min_buckets_in_flight).
std::vector<std::pair<size_t, size_t>> grad_ready_ranges(const ParamLayout& layout);

// The units in which ZeRO-3 gathers parameters (model/gpt2.h ParamGate), each one
// contiguous layout range [first, second): unit l < L is layer l's 12 tensors, unit L is
// lnf (lnfw, lnfb), unit L+1 the embeddings (wpe, wte). param_unit_of(t, L) is t's unit.
std::vector<std::pair<size_t, size_t>> param_unit_ranges(const ParamLayout& layout, int num_layers);
int param_unit_of(const ParamTensor& t, int num_layers);

// Number of parameters as GPT-2 counts them (with Vp rows of wte): layout.total.
size_t num_parameters(const GPT2Config& cfg);

}  // namespace rz
