// comm/debug/fingerprint.cpp: see fingerprint.h.
#include "comm/debug/fingerprint.h"

#include <cstring>

#include "base/check.h"

namespace rz {

Fingerprint make_fingerprint(CollectiveKind kind, size_t count, DType dt, int op, int root, uint64_t seq) {
  Fingerprint fp;
  fp.seq = seq;
  fp.kind = static_cast<int32_t>(kind);
  fp.count = count;
  fp.dtype = static_cast<int32_t>(dt);
  fp.op = op;
  fp.root = root;
  return fp;
}

std::string describe(const Fingerprint& fp) {
  std::string s = strfmt("#%llu %s(", static_cast<unsigned long long>(fp.seq),
                         collective_name(static_cast<CollectiveKind>(fp.kind)));
  auto kind = static_cast<CollectiveKind>(fp.kind);
  if (kind == CollectiveKind::barrier) return s + ")";
  s += strfmt("%s, count %llu", dtype_name(static_cast<DType>(fp.dtype)), static_cast<unsigned long long>(fp.count));
  if (fp.op >= 0) s += strfmt(", %s", reduce_op_name(static_cast<ReduceOp>(fp.op)));
  if (fp.root >= 0) s += strfmt(", root %d", fp.root);
  return s + ")";
}

FingerprintError::FingerprintError(int peer_rank, const Fingerprint& m, const Fingerprint& t)
    : PeerError(peer_rank, strfmt("collective mismatch (RINGZERO_COMM_DEBUG): this rank runs %s but rank %d runs %s",
                                  describe(m).c_str(), peer_rank, describe(t).c_str())),
      mine(m),
      theirs(t) {}

int first_disagreeing_rank(const Fingerprint* all, int n, int me) {
  for (int q = 0; q < n; ++q)
    if (q != me && std::memcmp(&all[q], &all[me], sizeof(Fingerprint)) != 0) return q;
  return -1;
}

FlightMismatch flight_mismatch(const Fingerprint& mine, const Fingerprint& theirs, int other_rank) {
  FlightMismatch m;
  m.other_rank = other_rank;
  m.seq = mine.seq;
  m.mine_kind = mine.kind;
  m.mine_dtype = mine.dtype;
  m.mine_count = mine.count;
  m.mine_op = mine.op;
  m.mine_root = mine.root;
  m.theirs_kind = theirs.kind;
  m.theirs_dtype = theirs.dtype;
  m.theirs_count = theirs.count;
  m.theirs_op = theirs.op;
  m.theirs_root = theirs.root;
  return m;
}

}  // namespace rz
