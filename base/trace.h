// base/trace.h: a timeline recorder for `ringzero train --trace`, usable from every module.
//
// Records spans ("complete" events) and counter samples in memory while a trace window is
// open, and serialises one rank's events as Chrome trace-event JSON objects, the format
// Perfetto and chrome://tracing open (PyTorch's profiler writes it too). train/timeline.*
// opens the window, aligns the ranks' clocks and has rank 0 write the merged file.
//
// Tracks: every rank is one process row (pid = rank) with two threads in it:
//   compute (tid 1)  forward / backward per layer, optimizer, data loading, checkpoint, ...
//   comm    (tid 2)  one span per collective, with its bytes, count and bucket index
// Counters (the "overlap %" of a step) are their own rows under the rank.
//
// Cost when no window is open: every marker is one relaxed atomic load and a branch.
// Events carry the rank they belong to, so ranks that are threads of one process (the
// thread transport) keep separate rows: a thread says which rank it works for with
// set_thread_rank(); the comm path passes its rank explicitly.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace rz::trace {

enum class Track : int { compute = 1, comm = 2 };

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

// True while a trace window is open. One relaxed load: call sites branch on it first.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
// Opens / closes the window. start() also drops earlier events and makes now the clock's zero.
void start();
void stop();

// Microseconds since start() on this process's steady clock.
double now_us();

// The rank this thread records for (default: set_process_rank's, else 0).
void set_thread_rank(int rank);
void set_process_rank(int rank);
int thread_rank();

// The gradient bucket the next collective issued from this thread belongs to (-1: none).
// Strategies set it around their submit; the communicator carries it to its comm thread.
void set_bucket(int bucket);
int bucket();

// A span [ts_us, ts_us + dur_us] named `name` on a rank's track. args_json is the inside of
// a JSON object ("\"bytes\":123,\"bucket\":4") or empty.
void span(int rank, Track track, const std::string& name, double ts_us, double dur_us,
          const std::string& args_json = {});
// A counter sample: the row `name` of `rank` takes `value` at ts_us.
void counter(int rank, const std::string& name, double ts_us, double value);

// One rank's recorded events as comma-separated JSON objects (no brackets), for merging.
std::string rank_events_json(int rank);
// How many spans of `rank` on `track` were recorded since start() (tests and checks).
size_t count_spans(int rank, Track track);

// Records a span on the compute track from construction to destruction. `index` >= 0 is
// appended to the name ("backward layer 3"). name must outlive the scope (a literal).
class Scope {
 public:
  explicit Scope(const char* name, int index = -1) {
    if (enabled()) {
      name_ = name;
      index_ = index;
      t0_ = now_us();
    }
  }
  ~Scope() {
    if (name_ != nullptr) finish();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void finish();
  const char* name_ = nullptr;
  int index_ = -1;
  double t0_ = 0;
};

// Escapes a string for a JSON string literal (without the quotes).
std::string json_escape(const std::string& s);

}  // namespace rz::trace

#define RZ_TRACE_CONCAT2(a, b) a##b
#define RZ_TRACE_CONCAT(a, b) RZ_TRACE_CONCAT2(a, b)
// RZ_TRACE_SCOPE("optimizer"); RZ_TRACE_SCOPE("forward layer", l);
#define RZ_TRACE_SCOPE(...) ::rz::trace::Scope RZ_TRACE_CONCAT(rz_trace_scope_, __LINE__)(__VA_ARGS__)

namespace rz::trace {
// Labels the collectives issued in its scope with a gradient bucket (see set_bucket()).
class BucketLabel {
 public:
  explicit BucketLabel(int b) : prev_(bucket()) { set_bucket(b); }
  ~BucketLabel() { set_bucket(prev_); }
  BucketLabel(const BucketLabel&) = delete;
  BucketLabel& operator=(const BucketLabel&) = delete;

 private:
  int prev_;
};
}  // namespace rz::trace
