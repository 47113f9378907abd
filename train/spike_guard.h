// train/spike_guard.h: the loss-spike guard (--spike-zscore Z, off by default).
//
// A step whose loss (or gradient norm, --spike-metric grad_norm) lies more than Z standard
// deviations above the mean of the last W accepted steps (--spike-window W) does not update
// the model: its gradients are computed and synchronised as usual, then AdamW is skipped
// (llm.c's --skip-update-lossz / -gradz, with a window of its last values). The window
// holds accepted steps only, so a spike does not widen the band it is judged by; until it
// is full nothing is skipped. A skipped step counts against --max-consecutive-skips, the
// same bound --skip-nonfinite's skips count against: a run that keeps skipping ends with
// an error instead of training on nothing.
//
// Agreement: the value is the same on every rank (the loss is all-reduced, the norm comes
// from the same reduced partials in the same order), the arithmetic is fixed (two passes
// in double over the window, oldest first), and the ranks still vote (an all-reduce of the
// decision, so a backend whose reductions differ in the last bit cannot split them): every
// rank skips the same steps, and the same run on the same rank count skips the same steps.
// A resumed run starts with an empty window.
#pragma once

#include <deque>
#include <string>

namespace rz {

enum class SpikeMetric { loss, grad_norm };
SpikeMetric parse_spike_metric(const std::string& s);  // "loss" | "grad_norm"

class SpikeGuard {
 public:
  SpikeGuard(int window, double zscore);
  // (x - mean) / std over the window; NaN while it holds fewer than `window` values, 0 when
  // its values are all equal.
  double zscore(double x) const;
  // A spike: not finite, or z > the threshold (a full window).
  bool is_spike(double x) const;
  // x joins the window; the oldest value leaves once it holds `window`.
  void accept(double x);
  size_t size() const { return values_.size(); }

 private:
  size_t window_;
  double threshold_;
  std::deque<double> values_;  // oldest first
};

}  // namespace rz
