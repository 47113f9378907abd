// model/reference_state.cpp: a verify reference in a safetensors file (see reference_state.h).
#include "model/reference_state.h"

#include <cmath>

#include "base/check.h"
#include "base/memory.h"
#include "model/hf_llama.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace rz {

DebugState read_reference_state(const std::string& path, const ModelConfig& cfg_in) {
  ModelConfig cfg = cfg_in;
  finalize_config(cfg);
  RZ_CHECK(cfg.family == ModelFamily::llama,
           "%s: a safetensors reference names Hugging Face Llama parameters; a %s model's reference is llm.c's "
           "debug-state file", path.c_str(), family_name(cfg.family));
  const SafetensorsFile f(path);
  auto tensor = [&](const std::string& name, const std::vector<uint64_t>& shape) -> const SafeTensorInfo& {
    const SafeTensorInfo* t = f.find(name);
    RZ_CHECK(t != nullptr, "%s: no tensor '%s' (a reference holds inputs, targets, logits, loss and grad.<name>)",
             path.c_str(), name.c_str());
    RZ_CHECK(t->shape == shape, "%s: tensor '%s' has shape %s, expected %s", path.c_str(), name.c_str(),
             shape_text(t->shape).c_str(), shape_text(shape).c_str());
    return *t;
  };
  const SafeTensorInfo* in = f.find("inputs");
  RZ_CHECK(in != nullptr && in->shape.size() == 2, "%s: no 2-D tensor 'inputs' (B, T)", path.c_str());
  const uint64_t B = in->shape[0], T = in->shape[1], V = static_cast<uint64_t>(cfg.vocab_size);
  RZ_CHECK(B >= 1 && B <= (1u << 20) && T >= 1 && T <= static_cast<uint64_t>(cfg.max_seq_len),
           "%s: inputs of shape %s, expected B >= 1 and 1 <= T <= maxT = %d", path.c_str(), shape_text(in->shape).c_str(),
           cfg.max_seq_len);
  DebugState s;
  s.B = static_cast<int>(B);
  s.T = static_cast<int>(T);
  const size_t N = static_cast<size_t>(B * T);
  std::vector<float> ids(N);
  for (const char* name : {"inputs", "targets"}) {
    f.read_f32(tensor(name, {B, T}), 0, N, ids.data());
    std::vector<int>& out = name[0] == 'i' ? s.x : s.y;
    out.resize(N);
    for (size_t i = 0; i < N; ++i) {
      RZ_CHECK(ids[i] >= 0 && ids[i] < float(V) && ids[i] == std::floor(ids[i]),
               "%s: %s[%zu] = %g is not a token id in [0, %llu)", path.c_str(), name, i, ids[i],
               static_cast<unsigned long long>(V));
      out[i] = static_cast<int>(ids[i]);
    }
  }
  resize_or_fail(s.logits, N * static_cast<size_t>(V), "the reference's logits");
  f.read_f32(tensor("logits", {B, T, V}), 0, s.logits.size(), s.logits.data());
  f.read_f32(tensor("loss", {1}), 0, 1, &s.loss);
  const ParamLayout lay = build_param_layout(cfg);
  resize_or_fail(s.grads, lay.total, "the reference's gradients");
  std::fill(s.grads.begin(), s.grads.end(), 0.0f);  // the vocabulary's padding rows stay zero
  for (const ParamTensor& t : lay.tensors) {
    const size_t row = t.shape.size() > 1 ? t.shape[1] : t.numel;
    for (const HfPiece& p : hf_llama_pieces(cfg, t)) {
      const SafeTensorInfo& g = tensor("grad." + p.name, p.shape);
      f.read_f32(g, 0, static_cast<size_t>(g.numel), s.grads.data() + t.offset + p.first_row * row);
    }
  }
  return s;
}

}  // namespace rz
