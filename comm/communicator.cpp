// comm/communicator.cpp: the small free functions of communicator.h (names, shards, stats).
#include "comm/communicator.h"

#include <algorithm>

#include "base/check.h"

namespace rz {

void FinishableWork::wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return finished_; });
  if (error_) std::rethrow_exception(error_);
}

bool FinishableWork::done() {
  std::lock_guard<std::mutex> l(mu_);
  return finished_;
}

void FinishableWork::finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> l(mu_);
  error_ = std::move(error);
  finished_ = true;
  cv_.notify_all();
}

size_t dtype_size(DType t) { return t == DType::bf16 ? 2 : 4; }

const char* dtype_name(DType t) { return t == DType::bf16 ? "bf16" : "fp32"; }

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::avg ? "avg" : "sum"; }

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
  }
  return "unknown";
}

std::string comm_span_args(uint64_t bytes_sent, uint64_t count, DType dt, uint64_t seq, int bucket) {
  std::string args = strfmt("\"bytes_sent\":%llu,\"count\":%llu,\"dtype\":\"%s\",\"seq\":%llu",
                            static_cast<unsigned long long>(bytes_sent), static_cast<unsigned long long>(count),
                            dtype_name(dt), static_cast<unsigned long long>(seq));
  if (bucket >= 0) args += strfmt(",\"bucket\":%d", bucket);
  return args;
}

// S = ceil(count / N) elements per shard; shard r starts at r*S, clipped to count, so
// trailing shards are shorter or empty when N does not divide count.
ShardRange shard_of(size_t count, int nranks, int rank) {
  RZ_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "shard_of: rank %d of %d ranks is out of range",
           rank, nranks);
  size_t n = static_cast<size_t>(nranks);
  size_t S = (count + n - 1) / n;
  size_t begin = std::min(count, S * static_cast<size_t>(rank));
  size_t end = std::min(count, begin + S);
  return ShardRange{begin, end - begin};
}

CommCounters CommStats::total() const {
  CommCounters t;
  for (const auto& c : by_kind) {
    t.calls += c.calls;
    t.bytes_sent += c.bytes_sent;
    t.bytes_recv += c.bytes_recv;
    t.seconds += c.seconds;
  }
  return t;
}

}  // namespace rz
