// Tests of the shm transport with real processes: every op x dtype x sum/avg for N in 1..8
// and counts {0, 1, N-1, N+1, 1001}, tiny segments, byte counters against the formula;
// AllGather chunks read in place through cross-memory attach (direct reads) and the
// fallback to the slots where a seccomp filter denies process_vm_readv.
// The checks themselves live in test_comm_procs.h, shared with the other process transport.
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
#include <fstream>
#include <sstream>

#include "test_comm_procs.h"
#include "test_process_util.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

TEST_CASE("shm transport: every collective, N = 1..8, fp32 and bf16") { check_transport_collectives("shm"); }

TEST_CASE("shm transport: a 1 MiB AllReduce with default segments sends 2(N-1)/N x M") {
  check_transport_allreduce_bytes("shm");
}

namespace {

// Whether this host lets a process read another one's memory (what direct reads need).
bool cma_permitted() {
  static volatile uint64_t word = 0;
  word = 0x5eed;
  pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  uint64_t seen = 0;
  iovec local{&seen, sizeof seen}, remote{const_cast<uint64_t*>(&word), sizeof seen};
  const bool ok = process_vm_readv(child, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof seen) &&
                  seen == 0x5eed;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return ok;
}

constexpr size_t shm_segment_bytes = 16 * 1024;  // chunks through the slots take several segments

// AllGather and AllReduce with chunks on both sides of kDirectChunkBytes: every chunk in
// place, the last one short (through the slots while the others are references: a mixed
// round), and chunks below the threshold. Values and byte counts as the ring's.
void check_large_collectives(Communicator& c) {
  const int N = c.size(), r = c.rank();
  for (DType dt : {DType::f32, DType::bf16}) {
    const size_t esz = dtype_size(dt), per_chunk = kDirectChunkBytes / esz;
    for (size_t count : {N * per_chunk - (N - 1), N * (per_chunk + 4000) + 3, per_chunk}) {
      const ShardRange mine = shard_of(count, N, r);
      Tensor shard(dt, mine.count), out(dt, count), inplace(dt, count);
      for (size_t i = 0; i < mine.count; ++i) {
        shard.set(i, gather_value(mine.offset + i));
        inplace.set(mine.offset + i, gather_value(mine.offset + i));
      }
      c.reset_stats();
      c.all_gather(shard.data(), out.data(), count, dt);
      c.all_gather(&inplace.bytes[mine.offset * esz], inplace.data(), count, dt);
      for (size_t i = 0; i < count; ++i)
        if (out.get(i) != gather_value(i) || inplace.get(i) != gather_value(i))
          throw Error(strfmt("all_gather N=%d count=%zu %s: element %zu wrong", N, count, dtype_name(dt), i));
      const auto& ag = c.stats().by_kind[int(CollectiveKind::all_gather)];
      if (ag.bytes_sent != 2 * ag_bytes_sent(count, N, r, dt) ||
          ag.bytes_recv != 2 * (count - mine.count) * esz)
        throw Error(strfmt("all_gather N=%d count=%zu: wrong byte count", N, count));
      Tensor buf(dt, count), in(dt, count), rs(dt, mine.count);
      for (size_t i = 0; i < count; ++i) {
        buf.set(i, value_of(r, i));
        in.set(i, value_of(r, i));
      }
      c.all_reduce(buf.data(), count, dt, ReduceOp::sum);
      c.reduce_scatter(in.data(), rs.data(), count, dt, ReduceOp::sum);
      for (size_t i = 0; i < count; ++i)
        if (buf.get(i) != expected_reduce(N, i, ReduceOp::sum, dt))
          throw Error(strfmt("all_reduce N=%d count=%zu: element %zu wrong", N, count, i));
      if (std::memcmp(rs.data(), &buf.bytes[mine.offset * esz], mine.count * esz) != 0)
        throw Error("reduce_scatter differs from all_reduce's shard");
      if (c.stats().by_kind[int(CollectiveKind::all_reduce)].bytes_sent != ar_bytes_sent(count, N, r, dt, shm_segment_bytes))
        throw Error(strfmt("all_reduce N=%d count=%zu: wrong byte count", N, count));
    }
  }
}

CommOptions shm_options() {
  CommOptions o;
  o.transport = CommTransport::shm;
  o.segment_bytes = shm_segment_bytes;
  o.timeout_s = 30;
  return o;
}

}  // namespace

TEST_CASE("shm transport: large AllGather chunks are read in place where CMA is permitted") {
  const bool direct = cma_permitted();
  if (!direct) WARN("process_vm_readv is not permitted here: only the fallback through the slots is tested");
  for (int N = 2; N <= 4; ++N) {
    std::string log = capture_stderr([&] {
      auto results = run_process_ranks(N, shm_options(), [&](Communicator& c) {
        check_large_collectives(c);
        if (!direct) return;
        // Proof that the chunks were references: once process_vm_readv is denied, a large
        // AllGather fails (with an error naming it) instead of going through the slots.
        if (!deny_syscall(__NR_process_vm_readv, EPERM)) throw Error("SKIP: cannot install a seccomp filter");
        // Chunks above kDirectChunkMaxBytes still go through the slots.
        const size_t big = N * (kDirectChunkMaxBytes / 4 + 1);
        std::vector<float> big_shard(shard_of(big, N, c.rank()).count, 2.0f), big_out(big);
        c.all_gather(big_shard.data(), big_out.data(), big, DType::f32);
        for (size_t i = 0; i < big; i += 4093)
          if (big_out[i] != 2.0f) throw Error("all_gather of chunks above the direct-read limit is wrong");
        const size_t count = 4 * kDirectChunkBytes;
        std::vector<float> shard(shard_of(count, N, c.rank()).count, 1.0f), out(count);
        try {
          c.all_gather(shard.data(), out.data(), count, DType::f32);
        } catch (const Error& e) {
          throw Error(std::string("EXPECTED ") + e.what());
        }
        throw Error("all_gather worked with process_vm_readv denied: its chunks went through the slots");
      });
      bool named = false;
      for (int r = 0; r < N; ++r) {
        INFO("N = " << N << ", rank " << r << ": " << results[r].error);
        if (results[r].error.find("SKIP: cannot install") != std::string::npos) {
          WARN("seccomp filters are not permitted here: the in-place proof is skipped");
          return;
        }
        if (direct) {
          CHECK(results[r].status == 1);
          CHECK(results[r].error.rfind("EXPECTED ", 0) == 0);
          named = named || results[r].error.find("process_vm_readv: Operation not permitted") != std::string::npos;
        } else {
          CHECK(results[r].status == 0);
        }
      }
      if (direct) CHECK(named);
    });
    INFO("stderr: " << log);
    if (direct) CHECK(log.find("ringzero: shm transport:") == std::string::npos);
  }
}

TEST_CASE("shm transport: where process_vm_readv is denied the ring uses the slots and says so once") {
  for (int N : {2, 3}) {
    bool skipped = false;
    std::string log = capture_stderr([&] {
      auto results = run_process_ranks(N, shm_options(), [](Communicator& c) { check_large_collectives(c); }, 60.0,
                                       [] {
                                         if (!deny_syscall(__NR_process_vm_readv, EPERM))
                                           throw Error("SKIP: cannot install a seccomp filter");
                                       });
      for (int r = 0; r < N; ++r) {
        INFO("N = " << N << ", rank " << r << ": " << results[r].error);
        if (results[r].error.find("SKIP: cannot install") != std::string::npos) skipped = true;
        else CHECK(results[r].status == 0);
      }
    });
    if (skipped) {
      WARN("seccomp filters are not permitted here: the fallback test is skipped");
      return;
    }
    INFO("stderr: " << log);
    CHECK(occurrences(log, "ringzero: shm transport:") == 1);
    CHECK(log.find("cannot read rank") != std::string::npos);
    CHECK(log.find("process_vm_readv: Operation not permitted") != std::string::npos);
  }
  // RINGZERO_SHM_CMA=0 turns direct reads off without a note; a bad value is an error.
  setenv("RINGZERO_SHM_CMA", "0", 1);
  std::string log = capture_stderr([&] {
    auto results = run_process_ranks(2, shm_options(), [](Communicator& c) { check_large_collectives(c); });
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << results[r].error);
      CHECK(results[r].status == 0);
    }
  });
  CHECK(log.find("ringzero: shm transport:") == std::string::npos);
  setenv("RINGZERO_SHM_CMA", "yes", 1);
  auto results = run_process_ranks(2, shm_options(), [](Communicator&) {});
  unsetenv("RINGZERO_SHM_CMA");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 1);
    CHECK(results[r].error.find("RINGZERO_SHM_CMA: expected 0 or 1, found 'yes'") != std::string::npos);
  }
}
