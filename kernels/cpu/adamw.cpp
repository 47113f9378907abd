// kernels/cpu/adamw.cpp
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "base/check.h"
#include "kernels/cpu/convert.h"

namespace rz {

template <typename P, typename G>
void adamw_update(P* params, float* master, float* m, float* v, const G* grads, size_t n,
                  const AdamWStep& s) {
  if constexpr (!std::is_same_v<P, float>)
    RZ_CHECK(master != nullptr, "adamw_update: bf16 parameters need fp32 master weights");
  else
    RZ_CHECK(master != nullptr || params != nullptr, "adamw_update: no weights to update");
  RZ_CHECK(s.t >= 1, "adamw_update: step t must be >= 1, found %llu", (unsigned long long)s.t);
  const float c1 = 1.0f - std::pow(s.beta1, float(s.t));
  const float c2 = 1.0f - std::pow(s.beta2, float(s.t));
  // One branch-free loop per storage case, so the compiler vectorises each of them.
  auto update = [&](auto read_w, auto write_w) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < int64_t(n); ++i) {
      const float g = load(grads[i]) * s.grad_scale;
      const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
      const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
      m[i] = mi;
      v[i] = vi;
      float w = read_w(i);
      w -= s.lr * ((mi / c1) / (std::sqrt(vi / c2) + s.eps) + s.weight_decay * w);
      write_w(i, w);
    }
  };
  auto from_master = [&](int64_t i) { return master[i]; };
  if (master == nullptr) {
    if constexpr (std::is_same_v<P, float>)
      update([&](int64_t i) { return params[i]; }, [&](int64_t i, float w) { params[i] = w; });
  } else if (params == nullptr) {
    update(from_master, [&](int64_t i, float w) { master[i] = w; });
  } else {
    update(from_master, [&](int64_t i, float w) {
      master[i] = w;
      params[i] = store<P>(w);
    });
  }
}

template void adamw_update<float, float>(float*, float*, float*, float*, const float*, size_t, const AdamWStep&);
template void adamw_update<float, bf16>(float*, float*, float*, float*, const bf16*, size_t, const AdamWStep&);
template void adamw_update<bf16, float>(bf16*, float*, float*, float*, const float*, size_t, const AdamWStep&);
template void adamw_update<bf16, bf16>(bf16*, float*, float*, float*, const bf16*, size_t, const AdamWStep&);

}  // namespace rz
