// Tests of the core spread (comm/transport/core_spread.h): when a rank moves itself off the
// core it shares with its right neighbour, the note a waiting receiver leaves in its slot
// ring's header, the move itself, and RINGZERO_CORE_SPREAD.
#include <catch2/catch.hpp>

#include <sched.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "base/check.h"
#include "comm/transport/core_spread.h"
#include "comm/transport/slot_ring.h"

using namespace rz;

namespace {

struct FakeMachine {
  bool free = true;
  double now = 100.0;
  std::vector<int> moved_off;
  CoreSpread::Hooks hooks() {
    return {[this] { return free; },
            [this](int cpu) {
              moved_off.push_back(cpu);
              return true;
            },
            [this] { return now; }};
  }
};

}  // namespace

TEST_CASE("core spread: kStreak waits in a row on the neighbour's core move the rank once") {
  FakeMachine m;
  CoreSpread s(m.hooks());
  for (int i = 0; i < CoreSpread::kStreak - 1; ++i) s.on_idle(3, 3);
  CHECK(m.moved_off.empty());
  s.on_idle(3, 3);
  CHECK(m.moved_off == std::vector<int>{3});
  CHECK(s.moves() == 1);
  // Still together right away: no second move before kRetryS.
  for (int i = 0; i < 4 * CoreSpread::kStreak; ++i) s.on_idle(3, 3);
  CHECK(m.moved_off.size() == 1);
  m.now += CoreSpread::kRetryS;
  for (int i = 0; i < CoreSpread::kStreak; ++i) s.on_idle(3, 3);
  CHECK(m.moved_off.size() == 2);
}

TEST_CASE("core spread: another core, no recent note, or no free core: nothing moves") {
  FakeMachine m;
  CoreSpread s(m.hooks());
  for (int round = 0; round < 10; ++round) {  // kStreak - 1 together, then one apart
    for (int i = 0; i < CoreSpread::kStreak - 1; ++i) s.on_idle(1, 1);
    s.on_idle(1, 0);
  }
  for (int round = 0; round < 10; ++round) {  // kStreak - 1 together, then no recent note
    for (int i = 0; i < CoreSpread::kStreak - 1; ++i) s.on_idle(1, 1);
    s.on_idle(1, -1);
  }
  CHECK(m.moved_off.empty());
  m.free = false;  // more runnable tasks than cores: sharing with the neighbour is the better deal
  for (int i = 0; i < 10 * CoreSpread::kStreak; ++i) s.on_idle(2, 2);
  CHECK(m.moved_off.empty());
  CHECK(s.moves() == 0);
}

TEST_CASE("slot ring: a receiver that waits notes its core; the sender reads it while it is recent") {
  HeapSlotRing heap(4, 64);
  SlotRing& ring = heap.ring();
  CHECK(ring.receiver_idle_cpu() == -1);  // no note yet
  PeerWatch send_watch, recv_watch;
  int noted = -2;
  recv_watch.on_idle = [&](int cpu) { noted = cpu; };
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the receiver's spin finds nothing
    const float x = 1.0f;
    ring.send(&x, sizeof x, MsgTag::data, send_watch);
  });
  float got = 0;
  ring.recv(sizeof got, MsgTag::data, [&](const void* p) { std::memcpy(&got, p, sizeof got); }, recv_watch);
  sender.join();
  CHECK(got == 1.0f);
  REQUIRE(noted >= 0);
  CHECK(ring.receiver_idle_cpu() == noted);  // it waited for the latest message
  // kRecentMessages more messages found without waiting: the note is old, it says nothing.
  SlotRingHeader* h = ring.header();
  h->head.store(h->head.load() + SlotRing::kRecentMessages);
  CHECK(ring.receiver_idle_cpu() == -1);
  h->receiver_idle.store((static_cast<uint64_t>(h->head.load()) << 32) | 6u);  // waiting for the next: core 5
  CHECK(ring.receiver_idle_cpu() == 5);
}

TEST_CASE("move_off_cpu: the thread leaves its core and keeps its full mask") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &all)) first = c;
  REQUIRE(first >= 0);
  if (CPU_COUNT(&all) < 2) {
    CHECK_FALSE(move_off_cpu(first));  // nowhere to go
    return;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  REQUIRE(sched_getcpu() == first);
  REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);  // free to move, still on `first`
  const int before = sched_getcpu();
  CHECK(move_off_cpu(before));
  CHECK(sched_getcpu() != before);
  cpu_set_t after;
  CPU_ZERO(&after);
  REQUIRE(sched_getaffinity(0, sizeof after, &after) == 0);
  CHECK(CPU_EQUAL(&after, &all));
  CHECK_FALSE(move_off_cpu(-1));
}

TEST_CASE("RINGZERO_CORE_SPREAD: 0 turns it off, 1 or unset on, anything else is an error naming it") {
  unsetenv("RINGZERO_CORE_SPREAD");
  CHECK(core_spread_allowed());
  setenv("RINGZERO_CORE_SPREAD", "0", 1);
  CHECK_FALSE(core_spread_allowed());
  setenv("RINGZERO_CORE_SPREAD", "1", 1);
  CHECK(core_spread_allowed());
  setenv("RINGZERO_CORE_SPREAD", "off", 1);
  CHECK_THROWS_WITH(core_spread_allowed(), "RINGZERO_CORE_SPREAD: expected 0 or 1, found 'off'");
  unsetenv("RINGZERO_CORE_SPREAD");
}
