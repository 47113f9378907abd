// kernels/cpu/adamw.h: one AdamW step over a contiguous element range.
//
// Mixed precision: the fp32 master weights, m and v are updated; the model's parameters
// (fp32 or bf16) receive the new master values, rounded to nearest even for bf16. In fp32
// mode the parameter array IS the master: pass master = nullptr and params as float.
// Gradients may be fp32 or bf16; they are multiplied by grad_scale first (global-norm
// clipping and averaging fold into it). Decoupled weight decay (Loshchilov & Hutter):
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   w -= lr * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * w )
// Tensors without decay (ParamTensor::weight_decay false: biases and layernorm) take
// weight_decay = 0: either the whole call (weight_decay 0), or, for one call over several
// consecutive tensors (a bucket, so a GPU launches once for many tensors), spans that say
// which elements decay. An element's update is the same either way, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/check.h"

namespace rz {

// Elements [previous span's end (0 for the first), end) of one call, all of one tensor's
// kind: decayed with AdamWStep::weight_decay, or not decayed.
struct AdamWSpan {
  size_t end;
  bool decay;
};

struct AdamWStep {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // applied to the whole range, or (with spans) to the decayed spans
  float grad_scale = 1.0f;    // multiplies every gradient (clipping, averaging)
  uint64_t t = 1;             // step number, 1-based, for bias correction
  // Host memory, or null. Ends strictly increase and the last is the call's n.
  const AdamWSpan* spans = nullptr;
  size_t num_spans = 0;
};

// Throws unless s's spans (if any) are increasing and end exactly at n.
inline void check_adamw_spans(const AdamWStep& s, size_t n) {
  RZ_CHECK((s.spans == nullptr) == (s.num_spans == 0), "adamw_update: %zu spans at %p", s.num_spans,
           static_cast<const void*>(s.spans));
  size_t prev = 0;
  for (size_t k = 0; k < s.num_spans; ++k) {
    RZ_CHECK(s.spans[k].end > prev && s.spans[k].end <= n,
             "adamw_update: span %zu ends at %zu, expected in (%zu, %zu]", k, s.spans[k].end, prev, n);
    prev = s.spans[k].end;
  }
  RZ_CHECK(s.num_spans == 0 || prev == n, "adamw_update: the spans cover %zu of %zu elements", prev, n);
}

// P: float or bf16 parameters (params may be null: then only master is updated).
// master: fp32 master weights (n), or null when P is float and params holds them.
// G: float or bf16 gradients. m, v: (n) fp32.
template <typename P, typename G>
void adamw_update(P* params, float* master, float* m, float* v, const G* grads, size_t n,
                  const AdamWStep& s);

}  // namespace rz
