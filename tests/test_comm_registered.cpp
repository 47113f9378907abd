// Tests of registered buffers (base/shared_memory.h) over the shm transport, with real
// processes: AllGather / ReduceScatter / AllReduce on shared host memory at N = 2..4
// against closed-form answers (odd counts, in place and not, chunks on both sides of the
// CMA limit); proof that the chunks were read from a mapping (they still arrive with
// process_vm_readv denied); a region freed and another allocated between collectives
// (no stale mapping, the freed one's mapping dropped); mapping denied (falls back to
// process_vm_readv and says so once) and RINGZERO_SHM_CMA=0 (the slots); a peer killed in
// the middle of an AllGather (a one-line error, well within the timeout).
#include <catch2/catch.hpp>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/bf16.h"
#include "base/clock.h"
#include "base/memory.h"
#include "base/shared_memory.h"
#include "comm/ring/ring.h"
#include "comm/ring_communicator.h"
#include "test_comm_procs.h"
#include "test_process_util.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

namespace {

// A tensor of count elements in shared host memory (Buffer::allocate_shared).
struct SharedTensor {
  DType dt;
  Buffer<unsigned char> buf;
  SharedTensor(DType d, size_t n) : dt(d) { buf.allocate_shared(MemTag::comm, n * dtype_size(d) + 1); }
  void* data() { return buf.data(); }
  unsigned char* at(size_t i) { return buf.data() + i * dtype_size(dt); }
  void set(size_t i, float v) {
    if (dt == DType::f32) std::memcpy(at(i), &v, 4);
    else { bf16 h = float_to_bf16(v); std::memcpy(at(i), &h, 2); }
  }
  float get(size_t i) {
    if (dt == DType::f32) { float v; std::memcpy(&v, at(i), 4); return v; }
    bf16 h; std::memcpy(&h, at(i), 2); return bf16_to_float(h);
  }
};

constexpr size_t kSegmentBytes = 16 * 1024;  // chunks through the slots take several segments

CommOptions shm_options() {
  CommOptions o;
  o.transport = CommTransport::shm;
  o.segment_bytes = kSegmentBytes;
  o.timeout_s = 30;
  return o;
}

// AllGather (apart and in place), AllReduce and ReduceScatter on shared buffers: values,
// byte counts, and all_reduce == reduce_scatter + all_gather bitwise.
void check_registered_collectives(Communicator& c, const std::vector<size_t>& counts, DType dt) {
  const int N = c.size(), r = c.rank();
  const size_t esz = dtype_size(dt);
  for (size_t count : counts) {
    const ShardRange mine = shard_of(count, N, r);
    SharedTensor shard(dt, mine.count), out(dt, count), inplace(dt, count);
    for (size_t i = 0; i < mine.count; ++i) {
      shard.set(i, gather_value(mine.offset + i));
      inplace.set(mine.offset + i, gather_value(mine.offset + i));
    }
    // A private shard gathered into shared memory: round 1 then sends from out's copy.
    std::vector<unsigned char> private_shard(mine.count * esz + 1);
    if (mine.count > 0) std::memcpy(private_shard.data(), shard.data(), mine.count * esz);
    SharedTensor out2(dt, count);
    c.reset_stats();
    c.all_gather(shard.data(), out.data(), count, dt);
    c.all_gather(inplace.at(mine.offset), inplace.data(), count, dt);
    c.all_gather(private_shard.data(), out2.data(), count, dt);
    for (size_t i = 0; i < count; ++i)
      if (out.get(i) != gather_value(i) || inplace.get(i) != gather_value(i) || out2.get(i) != gather_value(i))
        throw Error(strfmt("all_gather N=%d count=%zu %s: element %zu wrong", N, count, dtype_name(dt), i));
    const auto& ag = c.stats().by_kind[int(CollectiveKind::all_gather)];
    if (ag.bytes_sent != 3 * ag_bytes_sent(count, N, r, dt) || ag.bytes_recv != 3 * (count - mine.count) * esz)
      throw Error(strfmt("all_gather N=%d count=%zu: wrong byte count", N, count));
    SharedTensor buf(dt, count), in(dt, count), rs(dt, mine.count), back(dt, count);
    for (size_t i = 0; i < count; ++i) {
      buf.set(i, value_of(r, i));
      in.set(i, value_of(r, i));
    }
    c.all_reduce(buf.data(), count, dt, ReduceOp::sum);
    c.reduce_scatter(in.data(), rs.data(), count, dt, ReduceOp::sum);
    c.all_gather(rs.data(), back.data(), count, dt);
    for (size_t i = 0; i < count; ++i)
      if (buf.get(i) != expected_reduce(N, i, ReduceOp::sum, dt))
        throw Error(strfmt("all_reduce N=%d count=%zu: element %zu wrong", N, count, i));
    if (count > 0 && std::memcmp(back.data(), buf.data(), count * esz) != 0)
      throw Error(strfmt("N=%d count=%zu: reduce_scatter + all_gather differs from all_reduce", N, count));
    if (c.stats().by_kind[int(CollectiveKind::all_reduce)].bytes_sent != ar_bytes_sent(count, N, r, dt, kSegmentBytes))
      throw Error(strfmt("all_reduce N=%d count=%zu: wrong byte count", N, count));
  }
}

// Counts: chunks just under and over kDirectChunkBytes (odd), small ones, and chunks above
// kDirectChunkMaxBytes (references only because the buffer is registered).
std::vector<size_t> registered_counts(int N, DType dt) {
  const size_t per_chunk = kDirectChunkBytes / dtype_size(dt);
  std::vector<size_t> counts{1001, N * per_chunk - (N - 1), N * (per_chunk + 4000) + 3};
  if (dt == DType::f32) counts.push_back(N * (kDirectChunkMaxBytes / 4 + 5) + 1);
  return counts;
}

// Mappings of registered buffers in this process: its own regions and the ones it mapped.
size_t mapped_region_count() {
  std::ifstream f("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(f, line)) n += line.find("memfd:ringzero-buffer") != std::string::npos;
  return n;
}

void require_all_ok(const std::vector<RankResult>& results, const char* what) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO(what << ", rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 0);
  }
}

}  // namespace

TEST_CASE("registered buffers over shm: every collective, N = 2..4, read from a mapping") {
  for (int N = 2; N <= 4; ++N) {
    std::string log = capture_stderr([&] {
      auto results = run_process_ranks(N, shm_options(), [&](Communicator& c) {
        for (DType dt : {DType::f32, DType::bf16}) check_registered_collectives(c, registered_counts(N, dt), dt);
        if (!c.reads_shared_memory()) return;  // direct reads not permitted here: checked above through the slots
        // Proof that the chunks were read from a mapping, not through the kernel: with
        // process_vm_readv denied every size still arrives (a CMA read would fail).
        if (!deny_syscall(__NR_process_vm_readv, EPERM)) return;
        check_registered_collectives(c, registered_counts(N, DType::f32), DType::f32);
      }, 120.0);
      require_all_ok(results, "registered collectives");
    });
    INFO("stderr: " << log);
    CHECK(log.find("ringzero: shm transport:") == std::string::npos);
  }
}

TEST_CASE("registered buffers over shm: a freed region's mapping is dropped and a new one never hits it") {
  for (int N : {2, 3}) {
    auto results = run_process_ranks(N, shm_options(), [&](Communicator& c) {
      const int r = c.rank();
      const bool mapped = c.reads_shared_memory() && deny_syscall(__NR_process_vm_readv, EPERM);
      // Same size twice (the new region likely gets the old one's address and fd number),
      // then a different size; every round gathers different values.
      for (int round = 0; round < 4; ++round) {
        const size_t count = N * (kDirectChunkBytes / 4) * (round < 2 ? 2 : round + 1) + 7;
        const ShardRange mine = shard_of(count, N, r);
        SharedTensor out(DType::f32, count);
        for (size_t i = 0; i < mine.count; ++i) out.set(mine.offset + i, gather_value(mine.offset + i) + 1000.0f * round);
        c.all_gather(out.at(mine.offset), out.data(), count, DType::f32);
        for (size_t i = 0; i < count; ++i)
          if (out.get(i) != gather_value(i) + 1000.0f * round)
            throw Error(strfmt("round %d: element %zu is %g, expected %g (a stale mapping?)", round, i, out.get(i),
                               gather_value(i) + 1000.0f * round));
        // This rank's own region, and (with mappings) the left neighbour's current one:
        // the regions of earlier rounds were freed and their mappings dropped.
        const size_t expect = mapped ? 2 : 1;
        if (mapped_region_count() != expect)
          throw Error(strfmt("round %d: %zu registered mappings in this process, expected %zu", round,
                             mapped_region_count(), expect));
        c.barrier();  // the left neighbour frees its region only after this rank looked
      }
      if (shared_region_count() != 0) throw Error("a region outlived its buffer");
    });
    require_all_ok(results, "freed and reallocated regions");
  }
}

TEST_CASE("registered buffers over shm: mapping denied falls back to process_vm_readv and says so once") {
  for (int N : {2, 3}) {
    std::string log = capture_stderr([&] {
      auto results = run_process_ranks(N, shm_options(), [&](Communicator& c) {
        // Opening the left neighbour's /proc/<pid>/fd/<fd> fails as it would without the
        // right to read that process (nothing else here opens files after connecting).
        if (!deny_syscall(__NR_openat, EACCES)) throw Error("SKIP: cannot install a seccomp filter");
        for (int k = 0; k < 2; ++k) check_registered_collectives(c, registered_counts(N, DType::f32), DType::f32);
        if (!c.reads_shared_memory()) throw Error("SKIP: direct reads are not permitted here");
      }, 120.0);
      for (int r = 0; r < N; ++r) {
        INFO("N = " << N << ", rank " << r << ": " << results[r].error);
        if (results[r].error.rfind("SKIP: ", 0) == 0) WARN(results[r].error);
        else CHECK(results[r].status == 0);
      }
    });
    INFO("stderr: " << log);
    if (log.find("cannot map") == std::string::npos) continue;  // direct reads off here: nothing to say
    // Each rank that received a reference says so once, however many it received.
    CHECK(occurrences(log, "ringzero: shm transport:") == static_cast<size_t>(N));
    CHECK(occurrences(log, "cannot map rank") == static_cast<size_t>(N));
    CHECK(log.find("Permission denied") != std::string::npos);
  }
  // RINGZERO_SHM_CMA=0: no direct reads at all, registered or not; the slots, no note.
  setenv("RINGZERO_SHM_CMA", "0", 1);
  std::string log = capture_stderr([&] {
    auto results = run_process_ranks(3, shm_options(), [](Communicator& c) {
      if (c.reads_shared_memory()) throw Error("RINGZERO_SHM_CMA=0 left direct reads on");
      check_registered_collectives(c, registered_counts(3, DType::f32), DType::f32);
    }, 120.0);
    require_all_ok(results, "RINGZERO_SHM_CMA=0");
  });
  unsetenv("RINGZERO_SHM_CMA");
  CHECK(log.find("ringzero: shm transport:") == std::string::npos);
}

namespace {

// Kills its own process in round 2 of its 3rd AllGather.
class KillInAllGather final : public RingObserver {
 public:
  void on_round(const RingRound& r) override {
    if (r.phase == CollectiveKind::all_gather && r.round == 1 && !r.end) ++collectives_;
    if (collectives_ == 3 && r.phase == CollectiveKind::all_gather && r.round == 2 && !r.end) raise(SIGKILL);
  }

 private:
  int collectives_ = 0;
};

}  // namespace

TEST_CASE("registered buffers over shm: a peer killed in the middle of an AllGather is a one-line error") {
  const int N = 4, victim = 2;
  CommOptions o = shm_options();
  o.timeout_s = 60;  // the survivors must not need the timeout
  auto t0 = Clock::now();
  auto results = run_process_ranks(N, o, [&](Communicator& c) {
    KillInAllGather killer;
    if (c.rank() == victim) dynamic_cast<RingCommunicator&>(c).set_observer(&killer);
    const size_t count = N * (kDirectChunkBytes / 4) * 3 + 5;
    SharedTensor out(DType::f32, count);
    const ShardRange mine = shard_of(count, N, c.rank());
    for (int k = 0; k < 5; ++k) c.all_gather(out.at(mine.offset), out.data(), count, DType::f32);
  }, 50.0);
  const double secs = seconds_since(t0);
  REQUIRE(results[victim].status == 128 + SIGKILL);
  for (int r = 0; r < N; ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 1);
    CHECK(results[r].error.find(strfmt("rank %d: all_gather #3: peer rank", r)) != std::string::npos);
    CHECK(results[r].error.find("closed the channel") != std::string::npos);
    CHECK(results[r].error.find('\n') == std::string::npos);
  }
  CHECK(results[victim + 1].error.find("peer rank 2 closed the channel") != std::string::npos);
  CHECK(secs < 10.0);
}
