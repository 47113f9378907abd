// train/rank_setup.cpp: launch or become a rank, place it, connect it (rank_setup.h).
#include "train/rank_setup.h"

#include "base/check.h"
#include "comm/factory.h"
#include "kernels/backend.h"
#include "kernels/registry/device_registry.h"
#include "launch/launch.h"

namespace rz {

bool started_by_ringzero() { return launched_by_ringzero(); }

bool started_as_rank() { return launched_by_ringzero() || *rank_env_from_environment().launcher != 0; }

bool should_launch(const RankLaunch& job) {
  refuse_launch_flags_under_launcher(job.given_flags);
  return (job.nproc_per_node > 1 || job.nnodes > 1) && !started_as_rank();
}

int launch_ranks(const RankLaunch& job, const std::vector<std::string>& args) {
  std::vector<std::string> child{self_executable()};
  child.insert(child.end(), args.begin(), args.end());
  LaunchOptions lo;  // the job's part; the token and the grace periods keep their defaults
  lo.nproc_per_node = job.nproc_per_node;
  lo.nnodes = job.nnodes;
  lo.node_rank = job.node_rank;
  lo.master_addr = job.master_addr;
  lo.master_port = job.master_port;
  return launch_local_ranks(child, lo);
}

RankPlacement place_rank(DeviceSpec spec, const RankEnv& env, CommBackend comm) {
  RankPlacement at;
  at.device = spec.device();
  RZ_CHECK(at.device.is_cpu() || env.world_size == 1 || comm != CommBackend::mpi,
           "device %s with %d ranks: --comm mpi moves host buffers only; GPU ranks need --comm ring (ranks on one "
           "host, over its cuda transport) or --comm nccl",
           device_name(at.device).c_str(), env.world_size);
  RZ_CHECK(!at.device.is_cpu() || comm != CommBackend::nccl,
           "device cpu with --comm nccl: nccl moves GPU buffers only (add --device cuda, or use --comm ring)");
  const DeviceProvider& kind = device_kind_provider(at.device.kind);
  if (!spec.has_index() && env.world_size > 1) {
    // Plain `cuda` (or `sim`) on several ranks: the ranks of a host spread over its devices.
    const int visible = kind.device_count();
    const std::string why = kind.unavailable();
    RZ_CHECK(visible > 0, "device %s: rank %d: %s", device_spec_name(spec).c_str(), env.rank,
             why.empty() ? "no device is visible" : why.c_str());
    at.device.index = rank_device(env, -1, visible, "device", device_spec_name(spec).c_str());
  }
  at.backend = make_backend(at.device);  // no build support, driver or device: one line, now
  return at;
}

std::unique_ptr<Communicator> connect_rank(const RankEnv& env, const RankPlacement& at, CommOptions opts) {
  opts.device = at.device;
  return connect_communicator(env, opts);
}

}  // namespace rz
