// train/spike_guard.cpp: see spike_guard.h.
#include "train/spike_guard.h"

#include <cmath>

#include "base/check.h"

namespace rz {

SpikeMetric parse_spike_metric(const std::string& s) {
  if (s == "loss") return SpikeMetric::loss;
  if (s == "grad_norm") return SpikeMetric::grad_norm;
  RZ_FAIL("spike_metric: expected loss or grad_norm, found '%s'", s.c_str());
}

SpikeGuard::SpikeGuard(int window, double zscore) : window_(static_cast<size_t>(window)), threshold_(zscore) {
  RZ_CHECK(window >= 2, "spike_window: expected at least 2 steps, found %d", window);
  RZ_CHECK(std::isfinite(zscore) && zscore > 0, "spike_zscore: expected a number > 0, found %g", zscore);
}

double SpikeGuard::zscore(double x) const {
  if (values_.size() < window_) return NAN;
  double sum = 0;
  for (double v : values_) sum += v;
  const double mean = sum / static_cast<double>(values_.size());
  double sq = 0;
  for (double v : values_) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / static_cast<double>(values_.size()));
  if (sd == 0) return x == mean ? 0.0 : (x > mean ? INFINITY : -INFINITY);
  return (x - mean) / sd;
}

bool SpikeGuard::is_spike(double x) const {
  if (!std::isfinite(x)) return true;
  const double z = zscore(x);
  return std::isfinite(z) ? z > threshold_ : (values_.size() >= window_ && z > 0);
}

void SpikeGuard::accept(double x) {
  values_.push_back(x);
  if (values_.size() > window_) values_.pop_front();
}

}  // namespace rz
