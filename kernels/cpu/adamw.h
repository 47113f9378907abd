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
#include "kernels/adamw_step.h"  // AdamWStep, AdamWSpan, check_adamw_spans

namespace rz {

// P: float or bf16 parameters (params may be null: then only master is updated).
// master: fp32 master weights (n), or null when P is float and params holds them.
// G: float or bf16 gradients. m, v: (n) fp32.
template <typename P, typename G>
void adamw_update(P* params, float* master, float* m, float* v, const G* grads, size_t n,
                  const AdamWStep& s);

}  // namespace rz
