// model/layout.h: the flat parameter buffer, in gradient-ready order.
//
// All parameters live in one flat buffer. Its order is the order in which backward
// finishes their gradients, so a bucket (a contiguous range) becomes ready as a whole:
//   [lmhead]  (an untied classifier: finished first, by the classifier's backward)
//   lnfw, [lnfb],
//   for l = L-1 .. 0: fcprojw, [fcprojb], fcw, [fcb], ln2w, [ln2b], attprojw, [attprojb],
//                     qkvw, [qkvb], ln1w, [ln1b]
//   [wpe], wte
// Bracketed tensors exist where the family has them (model/family.h): GPT-2 has every bias,
// layernorm's bias and the learned positions wpe, and no lmhead; Llama has none of those and
// an lmhead when untied. wte comes last: as the tied classifier it receives gradient at the
// very start of backward, and as the token embedding at the very end. llm.c's checkpoint
// order (wte, wpe, ln1w[L], ln1b[L], qkvw[L], ...) is converted to and from this one on I/O.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace rz {

enum class ParamKind : int {
  wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb,
  lnfw, lnfb, lmhead
};
constexpr int kNumParamKinds = 17;
const char* param_kind_name(ParamKind k);  // "wte", "ln1w", ...

struct ParamTensor {
  ParamKind kind;
  int layer;                  // 0..L-1 for per-layer tensors, -1 otherwise
  std::string name;           // "wte", "h3.qkvw", "lnfw"
  size_t offset;              // first element in the flat buffer
  size_t numel;
  std::vector<size_t> shape;  // row-major, as llm.c: qkvw ((NH + 2 NKV) hs, C), fcw (4C or 2H, C), wte (Vp, C)
  bool weight_decay;          // AdamW decays matrices and embeddings, not biases or norm weights
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;  // in flat-buffer (gradient-ready) order
  size_t total = 0;                  // elements
  // Backward's units (grad_ready_ranges below), in order: consecutive element ranges that
  // cover [0, total).
  std::vector<std::pair<size_t, size_t>> grad_units;
  const ParamTensor& find(ParamKind kind, int layer = -1) const;  // throws if absent
  const ParamTensor* find_if(ParamKind kind, int layer = -1) const;  // null if absent
};

// The family's tensors for cfg's shape (cfg need not be finalized: a finalized copy is used).
ParamLayout build_param_layout(const ModelConfig& cfg);

// The units in which backward reports gradients final (GradSink::grads_ready), in order:
// the tensors one op finishes together -- a matmul's weight and bias, a norm's weight and
// bias, the embedding backward's wte and wpe, or one of them alone where the family has no
// bias (or no wpe); an untied lmhead is its own first unit. So: [lmhead], lnf, then per layer
// fcproj, fc, ln2, attproj, qkv, ln1, then the embeddings. A unit's gradient is final right
// after its op's backward; the strategies size their staging pools from these units
// (zero/buckets.h min_buckets_in_flight).
const std::vector<std::pair<size_t, size_t>>& grad_ready_ranges(const ParamLayout& layout);

// The units in which ZeRO-3 gathers parameters (model/model.h ParamGate), each one
// contiguous layout range [first, second): unit l < L is layer l's tensors, unit L is the
// model's end (lnf, and an untied lmhead), unit L+1 the embeddings (wte, and wpe).
// param_unit_of(t, L) is t's unit.
std::vector<std::pair<size_t, size_t>> param_unit_ranges(const ParamLayout& layout, int num_layers);
int param_unit_of(const ParamTensor& t, int num_layers);

// Number of parameters (with Vp rows of wte, and of lmhead): layout.total.
size_t num_parameters(const ModelConfig& cfg);

}  // namespace rz
