// comm/debug/fingerprint.h: what RINGZERO_COMM_DEBUG (--comm-debug) compares across ranks before
// every collective, on every backend.
//
// Why: ranks that run different programs (one skipped a bucket, one sends another count)
// hang or fail with an error far from the cause. In debug mode each collective first
// exchanges a fingerprint (sequence number, op, dtype, count, reduce op, root) -- the ring
// with its two neighbours (comm/ring/ring.cpp), mpi and nccl with everyone (an allgather of
// the fingerprints) -- and the first difference fails the collective with both sides
// named, before any data moves. The flight record (comm/debug/flight_recorder.h) keeps the
// finding for `ringzero doctor`.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "comm/debug/flight_recorder.h"

namespace rz {

// 32 bytes, no padding: compared with memcmp and sent as bytes.
struct Fingerprint {
  uint64_t seq = 0;
  uint64_t count = 0;
  int32_t kind = 0;
  int32_t dtype = 0;
  int32_t op = -1;    // ReduceOp or -1
  int32_t root = -1;  // broadcast root or -1
};
static_assert(sizeof(Fingerprint) == 32, "Fingerprint travels as 32 bytes");

Fingerprint make_fingerprint(CollectiveKind kind, size_t count, DType dt, int op, int root, uint64_t seq = 0);
// "#7 all_reduce(bf16, count 1024, avg)".
std::string describe(const Fingerprint& fp);

// A disagreement: this rank runs `mine`, rank `peer` runs `theirs`.
struct FingerprintError : PeerError {
  FingerprintError(int peer_rank, const Fingerprint& m, const Fingerprint& t);
  Fingerprint mine, theirs;
};

// The first rank of all[0..n) whose fingerprint differs from all[me], or -1.
int first_disagreeing_rank(const Fingerprint* all, int n, int me);

FlightMismatch flight_mismatch(const Fingerprint& mine, const Fingerprint& theirs, int other_rank);

}  // namespace rz
