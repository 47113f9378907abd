// base/trace.h: a timeline recorder for `ringzero train --trace`, usable from every module.
//
// Records spans ("complete" events) and counter samples in memory while a trace window is
// open, and serialises one rank's events as Chrome trace-event JSON objects, the format
// Perfetto and chrome://tracing open (PyTorch's profiler writes it too). viz/timeline.*
// opens the window, aligns the ranks' clocks and has rank 0 write the merged file.
//
// Tracks: every rank is one process row (pid = rank) with two threads in it:
//   compute (tid 1)  forward / backward per layer, optimizer, data loading, checkpoint, ...
//   comm    (tid 2)  one span per collective, with its bytes, count and bucket index
// Counters (the "overlap %" of a step) are their own rows under the rank.
//
// Cost when no window is open: every marker is one relaxed atomic load and a branch.
// On GPU ranks the compute track is device time (DeviceClock below).
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

// --- device time (GPU ranks). A GPU runs the work the host queues later than the host
// queues it, so host timestamps would show when work was enqueued. A backend whose ops are
// asynchronous supplies a DeviceClock (Backend::trace_clock, kernels/backend.h); while one
// is set for a rank, stamp() queues a timestamp on the device (a CUDA event on the compute
// stream) instead of reading the host clock, so Scope spans and viz/timeline's step spans
// cover when the device ran the work they enclose. resolve() turns the stamps into this
// clock's microseconds (origin: the moment start() found the device idle); viz/timeline
// calls it at the end of every traced step, and rank_events_json before writing. A rank
// without a clock (every CPU rank) records host time exactly as before. On the comm track,
// --comm nccl stamps its collectives on the comm stream (stamp_on), so they are device time
// too; the ring's spans stay host time (its comm thread waits for its own copies).
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  // Waits until the device has finished all queued work and makes that moment zero.
  virtual void set_origin() = 0;
  // Queues a timestamp after the work queued so far; returns its ticket (0, 1, 2, ...
  // since the last recycle()).
  virtual uint64_t stamp() = 0;
  // The same on another stream of this device (a cudaStream_t, or the simulated device's
  // sim::Stream): the ticket's time is when that stream reaches it.
  virtual uint64_t stamp_on(void* stream) = 0;
  // Microseconds from the origin to the ticket's timestamp; waits for the device to reach it.
  virtual double since_origin_us(uint64_t ticket) = 0;
  // Every ticket so far was resolved: the next stamp() may reuse their resources.
  virtual void recycle() = 0;
};

// The clock `rank` stamps with (null: host time). Setting one while a window is open sets
// its origin then; clearing one first resolves its pending stamps. The clock must outlive
// its registration, or call forget_device_clock() as it dies.
void set_device_clock(int rank, DeviceClock* clock);
// Drops every registration of `clock` and the events still waiting for its stamps.
void forget_device_clock(DeviceClock* clock);

// A moment on a rank's timeline: host microseconds, or a device ticket not yet resolved.
struct Stamp {
  double host_us = 0;
  int64_t ticket = -1;  // >= 0: a stamp of the rank's DeviceClock
};
// A device stamp when `rank` has a clock, else now_us(). Each stamp goes into exactly one
// span (as one of its ends) or one counter: the clock recycles tickets once every stamp
// given out is in an event and resolved.
Stamp stamp(int rank);
// The same on `stream` of the rank's device (DeviceClock::stamp_on); host time without a clock.
Stamp stamp_on(int rank, void* stream);
// Gives back a stamp that will go into no event (its span was abandoned by an error), so
// the rank's clock can recycle its tickets.
void drop(Stamp s);
void span(int rank, Track track, const std::string& name, Stamp begin, Stamp end, const std::string& args_json = {});
void counter(int rank, const std::string& name, Stamp at, double value);
// Resolves every device stamp recorded so far (waiting for the devices to reach them), then
// recycles the clocks' tickets.
void resolve();

// One rank's recorded events as comma-separated JSON objects (no brackets), for merging.
std::string rank_events_json(int rank);
// How many spans of `rank` on `track` were recorded since start() (tests and checks).
size_t count_spans(int rank, Track track);

// Records a span on the compute track from construction to destruction (device time on a
// rank with a DeviceClock). `index` >= 0 is appended to the name ("backward layer 3").
// name must outlive the scope (a literal).
class Scope {
 public:
  explicit Scope(const char* name, int index = -1) {
    if (enabled()) {
      name_ = name;
      index_ = index;
      t0_ = stamp(thread_rank());
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
  Stamp t0_;
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
