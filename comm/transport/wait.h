// comm/transport/wait.h: how a rank with nothing to do waits for shared memory to change.
//
// The slot ring (a message, a free slot) and the gather board (every rank's input) wait the
// same way, in three phases:
//   1. spin `spin_pauses` pause instructions (none when the ranks outnumber the cores: a
//      spinning rank only burns the time slice the rank it waits for needs; spins of 2000
//      pauses made the 8-byte all_reduce 9x slower on a loaded 2-core host,
//      bench/results/comm-targets-2026-11-29.md);
//   2. yield the core for up to 2 ms: a runnable peer gets to run, and no futex wake-up
//      latency (tens of microseconds) sits on the hot path. Only a peer that computes for
//      longer than this (a rank waiting at the start of a collective) reaches phase 3;
//   3. sleep on the futex of `word` in 10 ms slices. Whoever changes what `ready` looks at
//      bumps `word` afterwards and wakes it when `sleepers` is non-zero (futex_wake).
// `check(waited_s)` runs every 16 yields and between slices, with the seconds waited since
// phase 2 began: it throws what the wait must fail with (a closed channel, the deadline, a
// peer process that died) and returns false to stop waiting quietly.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rz {

// Shared futexes (not FUTEX_PRIVATE): a sleeper in one process is woken by a writer in another.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns);
void futex_wake(std::atomic<uint32_t>* word);

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Returns true once ready() holds, false when check() said to stop. on_idle() runs once,
// when the spin found nothing and the yields are about to begin (the slot ring's receiver
// looks there whether it shares its core with its neighbour: core_spread.h).
template <typename Ready, typename Check, typename OnIdle>
bool wait_on_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, int spin_pauses, const Ready& ready,
                  const Check& check, const OnIdle& on_idle) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < spin_pauses; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  if (ready()) return true;
  on_idle();
  const auto start = clock::now();
  auto waited_s = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  constexpr double kYieldPhaseS = 0.002;
  for (unsigned i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 15) == 15) {
      const double w = waited_s();
      if (!check(w)) return false;
      if (w >= kYieldPhaseS) break;
    }
    sched_yield();
  }
  for (;;) {
    const uint32_t seen = word.load();
    if (ready()) return true;
    if (!check(waited_s())) return false;
    sleepers.fetch_add(1);
    if (word.load() == seen && !ready()) futex_wait(&word, seen, 10'000'000);
    sleepers.fetch_sub(1);
  }
}

template <typename Ready, typename Check>
bool wait_on_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, int spin_pauses, const Ready& ready,
                  const Check& check) {
  return wait_on_word(word, sleepers, spin_pauses, ready, check, [] {});
}

}  // namespace rz
