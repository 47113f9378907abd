// comm/debug/flight_recorder.h: every rank's last K collectives, for the day a job hangs.
//
// Why: a distributed job that hangs or fails shows, on each rank, only that rank's side
// ("timed out waiting for rank 2"). What the user needs is the whole picture: which rank
// never issued which collective, or which ranks run different programs. So every
// communicator keeps a bounded ring buffer of its last K collectives (PyTorch's NCCL
// flight recorder is the model), and writes it out when something goes wrong; `ringzero
// doctor` (comm/debug/flight_doctor.h) merges the ranks' records into a few lines.
//
// An entry: the sequence number (issue order, the "#seq" of comm errors), the collective,
// dtype, element count, reduce op or root, what it is for (a CommPurpose: gradients,
// loss, grad norm, stop vote, parameter all-gather, ...), the gradient bucket and the
// training step of the issuing thread, and its progress: issued, started,
// ring phase and round reached (the ring writes it at the start of every round), done or
// failed, with steady-clock timestamps.
//
// Where it is fed: every backend passes through it at the same three points -- issue (the
// calling thread, async or blocking), start and done/failure (the thread that runs the
// collective: the caller, the comm thread, NCCL's watchdog) -- and the ring's round loop
// updates the progress word. The hot path is a few relaxed atomic stores into a
// preallocated slot of one cache line (no allocation, no lock, no clock read beyond the
// ones the communicator already takes for its counters); bench/results/flight-recorder-*.md
// measures what it costs. Readers (a dump from another thread) use the slot's seq as a
// seqlock: an entry overwritten while being read is skipped.
//
// When it is written (JSON, atomically, DIR/rank<R>.json, DIR = CommOptions::flight_dir or
// RINGZERO_FLIGHT_DIR; nothing is written without one):
//   - a collective fails (comm timeout, a peer that died or closed its channel, a
//     RINGZERO_COMM_DEBUG mismatch): the error message then names the file;
//   - SIGUSR1 (any rank, any time: `kill -USR1 PID`);
//   - the watchdog: a collective that made no progress for CommOptions::flight_watchdog_s.
// Each dump also prints one line to stderr: the rank, the file and where it waits.
// Signals and the watchdog are served by one process-wide thread that runs while any
// recorder lives (thread ranks in one process share it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace rz {

struct CommOptions;

// What the collectives issued from this thread within the scope are for; a string
// literal (it is kept by pointer). Nested scopes restore the outer one.
class CommPurpose {
 public:
  explicit CommPurpose(const char* what);
  ~CommPurpose();
  CommPurpose(const CommPurpose&) = delete;
  CommPurpose& operator=(const CommPurpose&) = delete;

 private:
  const char* prev_;
};
const char* comm_purpose();  // this thread's, or null

// The training step this thread works on (1-based; -1: none), recorded with each
// collective it issues. The training loop sets it at the start of every step.
void set_flight_step(int64_t step);
int64_t flight_step();

enum class FlightState : uint32_t { issued = 0, started = 1, done = 2, failed = 3 };
const char* flight_state_name(FlightState s);

// A RINGZERO_COMM_DEBUG disagreement, as the rank that caught it saw it.
struct FlightMismatch {
  int other_rank = -1;
  uint64_t seq = 0;
  int mine_kind = 0, mine_dtype = 0, theirs_kind = 0, theirs_dtype = 0;
  uint64_t mine_count = 0, theirs_count = 0;
  int mine_op = -1, theirs_op = -1, mine_root = -1, theirs_root = -1;
};

// The progress word the ring writes at the start of each round: phase and round.
inline int32_t flight_progress(CollectiveKind phase, int round) {
  return (static_cast<int32_t>(phase) + 1) << 16 | (round & 0xffff);
}

class FlightRecorder {
 public:
  FlightRecorder() = default;
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Sizes the buffer (opts.flight_entries, rounded up to a power of two; 0: record nothing,
  // sequence numbers only) and joins the process-wide dump thread.
  void configure(int rank, int nranks, const std::string& backend, const CommOptions& opts);
  bool enabled() const { return mask_ != 0; }
  void set_transport(const std::string& t) { transport_ = t; }

  // The calling (issuing) thread: returns the collective's sequence number (1, 2, ...).
  // t_issue_ns 0: the collective starts right away (blocking calls).
  uint64_t issue(CollectiveKind kind, DType dtype, uint64_t count, int op, int root, int64_t t_issue_ns = 0);
  // The executing thread.
  void start(uint64_t seq, int64_t t_ns);
  // Where the ring writes its round (flight_progress); null when not recording.
  std::atomic<int32_t>* progress_word(uint64_t seq);
  void done(uint64_t seq, int64_t t_ns);
  // The collective failed with `error` (peer: the rank it involves, -1 unknown): marks it,
  // writes the record, prints the one-line summary, and returns the file written ("" when
  // there is no directory or it could not be written; the second line says why).
  std::string fail(uint64_t seq, const std::string& error, int peer, const FlightMismatch* mismatch = nullptr);

  // Writes DIR/rank<R>.json now (reason: "signal", "watchdog", "timeout", ...); returns its
  // path or "". Safe from any thread.
  std::string dump(const std::string& reason);
  // The record as JSON text (what dump writes).
  std::string to_json(const std::string& reason) const;
  // One line: rank, where it waits (or its last collective), for the summary on stderr.
  std::string where() const;

  int rank() const { return rank_; }
  uint64_t issued() const { return next_seq_.load(std::memory_order_relaxed); }
  // For the watchdog: a word that changes whenever any collective makes progress, and
  // whether one is pending.
  uint64_t activity() const;
  bool pending() const;
  double watchdog_s() const { return watchdog_s_; }

  static int64_t now_ns();

 private:
  // One cache line: a collective touches one line of the buffer.
  struct alignas(64) Entry {
    std::atomic<uint64_t> seq{0};  // 0: empty; stored last at issue (the seqlock word)
    std::atomic<uint64_t> count{0};
    std::atomic<int64_t> t_issue{0}, t_start{0}, t_done{0};
    std::atomic<const char*> purpose{nullptr};
    std::atomic<int32_t> step{-1};
    // kind | dtype << 4 | (op + 1) << 8 | state << 12 | (root + 1) << 16 (roots past 65533 not kept)
    std::atomic<uint32_t> desc{0};
    std::atomic<int32_t> bucket{-1};
    std::atomic<int32_t> progress{0};
  };
  static_assert(sizeof(Entry) == 64, "a flight entry is one cache line");
  Entry* slot(uint64_t seq) { return mask_ != 0 ? &entries_[seq & mask_] : nullptr; }
  Entry* live(uint64_t seq);  // the entry of seq, if still in the buffer
  void set_state(Entry* e, FlightState s);

  int rank_ = 0, nranks_ = 1;
  std::string backend_, transport_, dir_, job_;
  double watchdog_s_ = 0;
  uint64_t mask_ = 0;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> next_seq_{0};   // last seq issued
  std::atomic<uint64_t> done_seq_{0};   // highest seq done (completion is in issue order)
  std::atomic<uint64_t> progress_events_{0};
  int64_t wall0_us_ = 0, steady0_ns_ = 0;  // to turn steady times into wall-clock times

  std::mutex dump_mu_;     // one dump at a time
  mutable std::mutex mu_;  // guards what follows
  std::string error_;
  int error_peer_ = -1;
  uint64_t error_seq_ = 0;
  bool has_mismatch_ = false;
  FlightMismatch mismatch_;
  bool registered_ = false;
};

}  // namespace rz
