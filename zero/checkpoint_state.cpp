// zero/checkpoint_state.cpp: the whole-array helpers over the chunk visitors.
#include "zero/checkpoint_state.h"

#include <cstring>

namespace rz {

void CheckpointState::get_optimizer_state(std::vector<float>& master, std::vector<float>& m,
                                          std::vector<float>& v) const {
  master.clear();
  m.clear();
  v.clear();
  visit_optimizer_state([&](StateArray a, const float* p, size_t n) {
    std::vector<float>& out = a == StateArray::master ? master : a == StateArray::m ? m : v;
    out.insert(out.end(), p, p + n);
  });
}

void CheckpointState::params_f32(float* out) {
  const ParamChunkFn fn = [out](size_t begin, const float* p, size_t n) {
    std::memcpy(out + begin, p, n * sizeof(float));
  };
  visit_params_f32(out != nullptr ? &fn : nullptr);
}

}  // namespace rz
