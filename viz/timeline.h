// viz/timeline.h: `train --trace run.json --trace-steps A:B`, the per-rank timeline.
//
// The recorder is base/trace.h; this file decides when it records and writes the file:
//   begin_step(A)   every rank: barrier, then trace::start(). The barrier is the clock
//                   alignment: each rank's zero is the moment it left the same barrier, so
//                   the ranks' rows line up to within the barrier's exit skew (a few
//                   microseconds on shm, a network hop on tcp). Steady clocks of different
//                   hosts never need to agree.
//   end_step(s)     a "step s" span over the whole step and the "overlap %" counter, with
//                   the comm counters' calls per collective as arguments; on a GPU rank
//                   (a device clock) the step's device stamps are resolved here; after step B,
//                   trace::stop() and every rank's events go to rank 0 (one AllGather of
//                   lengths, one of the JSON text), which writes the merged file.
// The file is Chrome trace-event JSON ({"traceEvents": [...]}): one process row per rank
// (pid = rank) with a compute thread (tid 1) and a comm thread (tid 2).
#pragma once

#include <string>

#include "base/trace.h"
#include "comm/communicator.h"
#include "kernels/backend.h"

namespace rz {

struct TraceSteps {
  int first = 2;  // 1-based, inclusive
  int last = 4;
};
// "A:B" (or "A" for one step), 1 <= A <= B. Throws naming `key` and the text.
TraceSteps parse_trace_steps(const std::string& text, const char* key = "trace_steps");

class TraceWindow {
 public:
  // path empty: the window never opens and every call is a no-op. steps is clipped to
  // [1, last_step]. device_clock: the model's backend's (Backend::trace_clock; null on the
  // CPU): while the window is open the rank's compute spans are device time. backend: the
  // model's, through which the events travel where the communicator takes device buffers
  // only (nccl); null: the CPU's.
  TraceWindow(std::string path, TraceSteps steps, int last_step, std::string label,
              trace::DeviceClock* device_clock = nullptr, Backend* backend = nullptr);
  ~TraceWindow();
  TraceWindow(const TraceWindow&) = delete;
  TraceWindow& operator=(const TraceWindow&) = delete;

  bool active() const { return !path_.empty(); }
  // Collective on the window's first step (every rank calls it every step).
  void begin_step(Communicator& comm, int step);
  // Collective on the window's last step. overlap: the step's gradient-comm overlap (0..1).
  void end_step(Communicator& comm, int step, double overlap);
  // Collective when the window opened but its last step never ran (the run stopped early).
  void finish(Communicator& comm);

 private:
  void write(Communicator& comm);

  std::string path_;
  TraceSteps steps_;
  std::string label_;  // "zero2, fp32": goes into each rank's row name
  Backend* backend_;
  trace::DeviceClock* clock_ = nullptr;
  int clock_rank_ = -1;  // the rank clock_ is registered for while the window is open
  bool open_ = false, written_ = false;
  trace::Stamp step_start_, counter_at_;  // the current step's start (two stamps: one per event)
  CommStats step_start_stats_;  // the counters when the current step began
  CommStats window_stats_;      // comm counters summed over the traced steps
};

// Gathers every rank's recorded events and has rank 0 write the merged trace to path
// (atomically). Collective. label names the run in the rows ("rank 1 · zero2").
// Returns the number of bytes written on rank 0 (0 elsewhere).
size_t write_merged_trace(Communicator& comm, Backend& backend, const std::string& path, const std::string& label,
                          const CommStats& window_stats);

}  // namespace rz
