#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace rz {

double LrSchedule::at(int step) const {
  if (step < warmup) return lr * (step + 1) / warmup;
  const int decay_steps = total_steps - warmup;
  if (decay_steps <= 0) return lr;
  const double p = std::min(1.0, static_cast<double>(step - warmup) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return lr * (floor + (1.0 - floor) * cosine);
}

}  // namespace rz
