// kernels/adamw_step.h: what one AdamW step is told (AdamWStep), the argument every
// backend's adamw_update takes (kernels/backend.h). Its own header, below the backends, so
// that the op table does not include the CPU kernels (kernels/cpu/adamw.h has the formula).
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

}  // namespace rz
