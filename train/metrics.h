// train/metrics.h: what one optimizer step reports, as a JSONL record and a console line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "base/memory.h"

namespace rz {

struct StepRecord {
  int step = 0;                    // 1-based: steps completed including this one
  int steps = 0;                   // total steps of the run
  float loss = 0.0f;               // mean training loss over the step's micro-batches, averaged over ranks
  std::optional<float> val_loss;   // when measured after this step
  std::optional<float> val_bpb;    // with val_loss, where the tokenizer gives each token's bytes (bits per byte)
  std::optional<double> hellaswag_acc, hellaswag_acc_norm;  // when measured after this step (--hellaswag)
  int hellaswag_examples = 0;      // examples scored, all ranks
  double lr = 0.0;
  float grad_norm = 0.0f;
  double tokens_per_s = 0.0;       // all ranks together
  uint64_t tokens = 0;             // tokens seen by all ranks up to and including this step
  double step_ms = 0.0;
  uint64_t comm_bytes = 0;         // sent by this rank during the step
  double comm_ms = 0.0;
  double overlap = 0.0;            // fraction of gradient sync hidden behind backward
  bool skipped = false;            // non-finite loss, step skipped (--skip-nonfinite)
  bool spike = false;              // the loss-spike guard skipped this step's update (--spike-zscore)
  double spike_z = 0.0;            // its z-score (when spike)
  int skips_total = 0;             // updates skipped so far in this run (non-finite and spikes)
  size_t mem_peak_bytes[kNumMemTags] = {};  // this rank, per tag, since the run started, on the model's device
  size_t mem_peak_total = 0;
};

// One JSON object per line, flushed after each, so a crashed run keeps its history.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  // append: keep what an interrupted run wrote (resume); otherwise start the file anew.
  // keep_through_step >= 0 (with append): drop the records after that step first.
  void open(const std::string& path, bool append, int keep_through_step = -1);
  void write(const StepRecord& r);

 private:
  FILE* f_ = nullptr;
  std::string path_;
};

std::string metrics_json_line(const StepRecord& r);

// "step   12/200 | loss 3.4567 | lr 5.98e-04 | norm 1.234 | 12.3k tok/s | 456 ms | ETA 1m23s | mem r0 12.3M r1 11.0M"
// rank_peak_mib: peak bytes of every rank in MiB (index = rank).
std::string format_progress(const StepRecord& r, double eta_s, const std::vector<float>& rank_peak_mib);
std::string format_duration(double seconds);  // "1m23s", "2h05m", "45s"

}  // namespace rz
