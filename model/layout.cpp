// model/layout.cpp: the flat parameter buffer in gradient-ready order (see layout.h).
#include "model/layout.h"

#include <algorithm>

#include "base/check.h"

namespace rz {

const char* param_kind_name(ParamKind k) {
  static const char* names[kNumParamKinds] = {
      "wte",  "wpe", "ln1w", "ln1b",    "qkvw",    "qkvb", "attprojw", "attprojb", "ln2w",
      "ln2b", "fcw", "fcb",  "fcprojw", "fcprojb", "lnfw", "lnfb",     "lmhead"};
  return names[static_cast<int>(k)];
}

const ParamTensor* ParamLayout::find_if(ParamKind kind, int layer) const {
  for (const auto& t : tensors)
    if (t.kind == kind && t.layer == layer) return &t;
  return nullptr;
}

const ParamTensor& ParamLayout::find(ParamKind kind, int layer) const {
  const ParamTensor* t = find_if(kind, layer);
  RZ_CHECK(t != nullptr, "parameter layout has no tensor %s for layer %d", param_kind_name(kind), layer);
  return *t;
}

ParamLayout build_param_layout(const ModelConfig& config) {
  ModelConfig cfg = config;
  finalize_config(cfg);
  const FamilyTraits& tr = family_traits(cfg.family);
  const size_t C = cfg.channels, Vp = cfg.padded_vocab_size, maxT = cfg.max_seq_len;
  const size_t Q = cfg.qkv_width(), F = cfg.fc_width(), H = cfg.intermediate;
  const bool norm_bias = tr.norm == NormKind::layernorm;
  ParamLayout lay;
  auto add = [&](ParamKind kind, int layer, std::vector<size_t> shape, bool decay) {
    ParamTensor t;
    t.kind = kind;
    t.layer = layer;
    t.name = layer >= 0 ? strfmt("h%d.%s", layer, param_kind_name(kind))
                        : std::string(param_kind_name(kind));
    t.offset = lay.total;
    t.numel = 1;
    for (size_t s : shape) t.numel *= s;
    t.shape = std::move(shape);
    t.weight_decay = decay;
    lay.total += t.numel;
    lay.tensors.push_back(std::move(t));
  };
  // One unit of backward: a weight, and its bias where there is one.
  auto unit = [&](ParamKind w, ParamKind b, int layer, std::vector<size_t> shape, bool decay, bool with_bias) {
    const size_t begin = lay.total, rows = shape[0];
    add(w, layer, std::move(shape), decay);
    if (with_bias) add(b, layer, {rows}, false);
    lay.grad_units.emplace_back(begin, lay.total);
  };
  if (!cfg.tied) unit(ParamKind::lmhead, ParamKind::lmhead, -1, {Vp, C}, true, false);
  unit(ParamKind::lnfw, ParamKind::lnfb, -1, {C}, false, norm_bias);
  for (int l = cfg.num_layers - 1; l >= 0; --l) {
    unit(ParamKind::fcprojw, ParamKind::fcprojb, l, {C, H}, true, tr.proj_bias);
    unit(ParamKind::fcw, ParamKind::fcb, l, {F, C}, true, tr.fc_bias);
    unit(ParamKind::ln2w, ParamKind::ln2b, l, {C}, false, norm_bias);
    unit(ParamKind::attprojw, ParamKind::attprojb, l, {C, C}, true, tr.proj_bias);
    unit(ParamKind::qkvw, ParamKind::qkvb, l, {Q, C}, true, tr.qkv_bias);
    unit(ParamKind::ln1w, ParamKind::ln1b, l, {C}, false, norm_bias);
  }
  // The embeddings: one unit, finished together by the encoder's backward.
  const size_t emb = lay.total;
  if (tr.position == PositionKind::learned) add(ParamKind::wpe, -1, {maxT, C}, true);
  add(ParamKind::wte, -1, {Vp, C}, true);
  lay.grad_units.emplace_back(emb, lay.total);
  return lay;
}

const std::vector<std::pair<size_t, size_t>>& grad_ready_ranges(const ParamLayout& layout) {
  return layout.grad_units;
}

int param_unit_of(const ParamTensor& t, int num_layers) {
  if (t.layer >= 0) return t.layer;
  return t.kind == ParamKind::wte || t.kind == ParamKind::wpe ? num_layers + 1 : num_layers;
}

std::vector<std::pair<size_t, size_t>> param_unit_ranges(const ParamLayout& layout, int num_layers) {
  std::vector<std::pair<size_t, size_t>> out(static_cast<size_t>(num_layers) + 2, {layout.total, 0});
  for (const ParamTensor& t : layout.tensors) {
    auto& u = out[static_cast<size_t>(param_unit_of(t, num_layers))];
    u.first = std::min(u.first, t.offset);
    u.second = std::max(u.second, t.offset + t.numel);
  }
  // Contiguity is what lets a unit be gathered as one range: the layout guarantees it.
  size_t covered = 0;
  for (auto [b, e] : out) covered += e - b;
  RZ_CHECK(covered == layout.total, "parameter layout: units cover %zu of %zu elements", covered, layout.total);
  return out;
}

size_t num_parameters(const ModelConfig& cfg) { return build_param_layout(cfg).total; }

}  // namespace rz
