// model/layout.cpp: the flat parameter buffer in gradient-ready order (see layout.h).
#include "model/layout.h"

#include <algorithm>

#include "base/check.h"

namespace rz {

const char* param_kind_name(ParamKind k) {
  static const char* names[kNumParamKinds] = {
      "wte",  "wpe",      "ln1w",     "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
      "ln2w", "ln2b",     "fcw",      "fcb",  "fcprojw", "fcprojb", "lnfw", "lnfb"};
  return names[static_cast<int>(k)];
}

const ParamTensor& ParamLayout::find(ParamKind kind, int layer) const {
  for (const auto& t : tensors)
    if (t.kind == kind && t.layer == layer) return t;
  RZ_FAIL("parameter layout has no tensor %s for layer %d", param_kind_name(kind), layer);
}

ParamLayout build_param_layout(const GPT2Config& cfg) {
  const size_t C = cfg.channels, Vp = cfg.padded_vocab_size, maxT = cfg.max_seq_len;
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
  add(ParamKind::lnfw, -1, {C}, false);
  add(ParamKind::lnfb, -1, {C}, false);
  for (int l = cfg.num_layers - 1; l >= 0; --l) {
    add(ParamKind::fcprojw, l, {C, 4 * C}, true);
    add(ParamKind::fcprojb, l, {C}, false);
    add(ParamKind::fcw, l, {4 * C, C}, true);
    add(ParamKind::fcb, l, {4 * C}, false);
    add(ParamKind::ln2w, l, {C}, false);
    add(ParamKind::ln2b, l, {C}, false);
    add(ParamKind::attprojw, l, {C, C}, true);
    add(ParamKind::attprojb, l, {C}, false);
    add(ParamKind::qkvw, l, {3 * C, C}, true);
    add(ParamKind::qkvb, l, {3 * C}, false);
    add(ParamKind::ln1w, l, {C}, false);
    add(ParamKind::ln1b, l, {C}, false);
  }
  add(ParamKind::wpe, -1, {maxT, C}, true);
  add(ParamKind::wte, -1, {Vp, C}, true);
  return lay;
}

std::vector<std::pair<size_t, size_t>> grad_ready_ranges(const ParamLayout& layout) {
  const std::vector<ParamTensor>& t = layout.tensors;
  RZ_CHECK(t.size() % 2 == 0, "parameter layout: %zu tensors do not pair up", t.size());
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < t.size(); i += 2) out.emplace_back(t[i].offset, t[i + 1].offset + t[i + 1].numel);
  return out;
}

int param_unit_of(const ParamTensor& t, int num_layers) {
  if (t.layer >= 0) return t.layer;
  return t.kind == ParamKind::lnfw || t.kind == ParamKind::lnfb ? num_layers : num_layers + 1;
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

size_t num_parameters(const GPT2Config& cfg) { return build_param_layout(cfg).total; }

}  // namespace rz
