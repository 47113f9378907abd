// comm/transport/core_spread.h: a rank that shares its core with the neighbour it waits on,
// while a core stands idle, moves itself to another one.
//
// Two ranks of a host ring that could each have a core sometimes end up on one: the
// rendezvous wakes each rank from a socket read, and the kernel places a woken task beside
// its waker when it judges the last-level cache busy (on 2 cores one busy core is enough to
// stop its search for an idle one). From then on neither rank sleeps (they spin and yield,
// wait.h), and the load balancer leaves two cache-hot tasks together for longer than a short
// job lasts: on a 2-core Zen 3, 4 and 10 of two sets of 120 runs of the 2-rank 8-byte
// AllReduce (2000 calls, about 10 ms) had both ranks on one core from the end of connect to
// the last call, at 4.6-6.0 us per call against at most 0.97 us in every other run
// (bench/results/core-spread-2026-12-04.md). A training step feels it too, only less: its
// first waits run at the speed of one core.
//
// So a receiver whose spin found nothing (it is about to yield) notes its core in its
// inbox's header, and looks at the core its right neighbour noted while waiting for this
// rank's latest message. After kStreak such waits in a row on a shared core, and at most
// once per kRetryS, it checks that a core is free (the runnable tasks of the whole machine,
// /proc/loadavg, are no more than the cores this rank may use) and moves itself off its
// core: sched_setaffinity without it, which migrates the caller at once, then back to the
// full mask, so the scheduler stays free to place it afterwards. Under load (more runnable
// tasks than cores) nothing moves: sharing a core with the neighbour costs a yield per
// message, sharing one with an unrelated process costs a time slice. RINGZERO_CORE_SPREAD=0
// turns it off (a job whose ranks were placed by hand, or an A/B measurement).
#pragma once

#include <functional>

namespace rz {

class CoreSpread {
 public:
  static constexpr int kStreak = 8;         // waits in a row on the neighbour's core
  static constexpr double kRetryS = 0.05;   // between two attempts (moves or "no free core")

  struct Hooks {
    std::function<bool()> core_free;          // default: core_free_now()
    std::function<bool(int cpu)> move_off;    // default: move_off_cpu(cpu)
    std::function<double()> now_s;            // default: steady clock
  };
  CoreSpread();
  explicit CoreSpread(Hooks hooks);

  // A receive wait's spin found nothing. cpu: the core this rank runs on; right_cpu: the core
  // its right neighbour noted while waiting for this rank's latest message (-1: none noted).
  void on_idle(int cpu, int right_cpu);
  int moves() const { return moves_; }

 private:
  Hooks hooks_;
  int streak_ = 0;
  double next_try_s_ = 0;
  int moves_ = 0;
};

// RINGZERO_CORE_SPREAD: false when it is 0 (no rank ever moves itself), an error naming it
// when it is not 0 or 1. The factory asks before the rendezvous, as for RINGZERO_SHM_CMA.
bool core_spread_allowed();
// Whether some core this thread may use is probably idle: the machine's runnable tasks
// (/proc/loadavg, this thread and its neighbour among them) are no more than those cores.
bool core_free_now();
// Moves the calling thread off cpu and gives it back its full affinity mask. False when it
// may use no other core, or the kernel refused.
bool move_off_cpu(int cpu);

}  // namespace rz
