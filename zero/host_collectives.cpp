// zero/host_collectives.cpp: host arrays through a communicator (see host_collectives.h).
#include "zero/host_collectives.h"

#include <cstring>

#include "base/check.h"

namespace rz {

HostCollectives::HostCollectives(Communicator& comm, Backend& backend)
    : comm_(comm), be_(backend), direct_(comm.takes_host_buffers() || backend.device().is_cpu()) {}

float* HostCollectives::stage(size_t n) {
  if (stage_.size() < n) stage_.allocate(MemTag::workspace, n, be_.device());
  return stage_.data();
}

void HostCollectives::all_reduce(float* x, size_t n, ReduceOp op) {
  if (direct_ || n == 0) return comm_.all_reduce(x, n, DType::f32, op);
  float* d = stage(n);
  be_.copy_from_host(d, x, n * sizeof(float));
  comm_.all_reduce(d, n, DType::f32, op);
  be_.copy_to_host(x, d, n * sizeof(float));
}

void HostCollectives::all_gather(const float* mine, float* all, size_t count) {
  if (direct_ || count == 0) return comm_.all_gather(mine, all, count, DType::f32);
  const ShardRange s = shard_of(count, comm_.size(), comm_.rank());
  float* d = stage(count);
  be_.copy_from_host(d + s.offset, mine, s.count * sizeof(float));
  comm_.all_gather(d + s.offset, d, count, DType::f32);  // in place
  be_.copy_to_host(all, d, count * sizeof(float));
}

}  // namespace rz
