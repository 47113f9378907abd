// bench/flight_recorder_cost.cpp: what the flight recorder (comm/debug/flight_recorder.h) costs.
//
//   bench_flight_recorder_cost [ITERS] [ROUNDS]
//
// 1. The recorder alone: issue + start + one progress store + done per collective (the
//    timestamps are the ones the communicator already takes for its counters), against
//    the same loop on a recorder of 0 entries (sequence numbers only).
// 2. An 8-byte AllReduce on one rank (no peer, so no noise from a peer's scheduling): the
//    whole per-call path of RingCommunicator with the default entries and with none.
// 3. An 8-byte AllReduce on 2 thread ranks, with and without.
// Each measurement alternates recorder on / off for ROUNDS rounds of ITERS calls and prints
// every round's ns per call, then the medians and the median of the per-round differences.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "comm/factory.h"
#include "comm/debug/flight_recorder.h"

using namespace rz;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// ns per call of fn(entries) over iters calls.
template <typename Fn>
void ab(const char* what, int rounds, long iters, Fn fn) {
  std::vector<double> on, off, diff;
  for (int r = 0; r < rounds; ++r) {
    const double a = fn(kFlightEntriesDefault, iters), b = fn(0, iters);
    on.push_back(a);
    off.push_back(b);
    diff.push_back(a - b);
    std::printf("  %-44s round %2d: on %8.1f ns  off %8.1f ns  diff %7.1f ns\n", what, r, a, b, a - b);
  }
  std::printf("%-46s median on %.1f ns, off %.1f ns, diff %.1f ns (min %.1f, max %.1f)\n", what, median(on),
              median(off), median(diff), *std::min_element(diff.begin(), diff.end()),
              *std::max_element(diff.begin(), diff.end()));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const long iters = argc > 1 ? std::atol(argv[1]) : 2000000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;

  ab("recorder alone (issue+start+round+done)", rounds, iters, [](size_t entries, long n) {
    CommOptions o;
    o.flight_entries = entries;
    FlightRecorder rec;
    rec.configure(0, 2, "ring", o);
    int64_t t = FlightRecorder::now_ns();
    const double t0 = now_s();
    for (long i = 0; i < n; ++i) {
      const uint64_t seq = rec.issue(CollectiveKind::all_reduce, DType::f32, 2, 0, -1);
      rec.start(seq, t);
      if (std::atomic<int32_t>* p = rec.progress_word(seq)) p->store(flight_progress(CollectiveKind::all_reduce, 1));
      rec.done(seq, t + 1);
      t += 2;
    }
    return (now_s() - t0) * 1e9 / double(n);
  });

  ab("8-byte all_reduce, 1 rank", rounds, iters, [](size_t entries, long n) {
    CommOptions o;
    o.flight_entries = entries;
    auto comms = make_thread_communicators(1, o);
    float x[2] = {1, 2};
    const double t0 = now_s();
    for (long i = 0; i < n; ++i) comms[0]->all_reduce(x, 2, DType::f32, ReduceOp::sum);
    return (now_s() - t0) * 1e9 / double(n);
  });

  ab("8-byte all_reduce, 2 thread ranks", rounds, iters / 20, [](size_t entries, long n) {
    CommOptions o;
    o.flight_entries = entries;
    auto comms = make_thread_communicators(2, o);
    double secs = 0;
    std::thread peer([&] {
      float x[2] = {1, 2};
      for (long i = 0; i < n; ++i) comms[1]->all_reduce(x, 2, DType::f32, ReduceOp::sum);
    });
    float x[2] = {1, 2};
    const double t0 = now_s();
    for (long i = 0; i < n; ++i) comms[0]->all_reduce(x, 2, DType::f32, ReduceOp::sum);
    secs = now_s() - t0;
    peer.join();
    return secs * 1e9 / double(n);
  });
  return 0;
}
