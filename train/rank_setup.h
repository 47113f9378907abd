// train/rank_setup.h: how a subcommand's process becomes one rank of its job, placed and
// connected. Every subcommand that runs ranks or builds a backend goes through here, so the
// launcher, the choice of GPU and the communicator's device are each written once.
//
//   RankLaunch job = ...;                          // --nproc-per-node, --nnodes, ... of the command
//   if (should_launch(job)) return launch_ranks(job, args);   // this process starts the ranks
//   RankEnv env = rank_env_from_environment();     // this process is a rank (or the only one)
//   RankPlacement at = place_rank(spec, env, comm);   // its device and backend, once
//   ModelOptions mo; mo.device = at.device; mo.backend = at.backend;   // the model shares it
//   CommOptions co = ...; auto comm = connect_rank(env, at, co);              // on at.device
//
// The model and the strategy come after: the trainer (train/loop.h) builds them from the
// settings table, and a bench that times a step builds them the same way
// (train/step.h: strategy_options, timed_step), on a rank set up by these same calls.
//
// Placement, decided once per rank: a device spec (`--device`),
// the rank's environment and the comm backend give the rank's device and its backend.
// `cuda:K` / `sim:K` put every rank on device K; plain `cuda` / `sim` on several ranks give
// rank r device LOCAL_RANK mod the devices its kind sees (kernels/registry/device_registry.h);
// one rank takes device 0. Nothing else picks a GPU or builds a backend: comm/ only checks
// the placed ordinal against the devices it sees.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/device_spec.h"
#include "comm/communicator.h"
#include "comm/options.h"
#include "comm/rank_env.h"

namespace rz {

class Backend;

// How many processes a command asks for and where its job meets (launch/launch.h's
// LaunchOptions, the part a command sets).
struct RankLaunch {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port (single node only)
  // The launch flags as the user typed them ("--nproc-per-node 2"): beside another launcher's
  // environment (a stale RANK/WORLD_SIZE) they are refused, since the environment would win.
  std::vector<std::string> given_flags;
};

// True when this process must start the job's ranks: more than one process asked for
// (nproc_per_node or nnodes > 1) and no launcher (ringzero's, torchrun, mpirun, srun) made
// this process a rank already. Throws when job.given_flags meet another launcher's variables.
bool should_launch(const RankLaunch& job);

// Re-executes this executable with `args` (the command's argv from the subcommand's name on,
// as the ranks should see it) once per local rank, watches them and returns the job's exit
// status: 0, or the first failed rank's (launch/launch.h says how ranks are stopped).
int launch_ranks(const RankLaunch& job, const std::vector<std::string>& args);

// True inside a rank that ringzero's own launcher started (its WORLD_SIZE is the command's
// process count).
bool started_by_ringzero();
// True when any launcher (ringzero's, torchrun, mpirun, srun) made this process a rank.
bool started_as_rank();

// Where a rank runs: its device (the ordinal decided) and that device's op table, built once.
// The model shares the backend (ModelOptions::backend = backend); the strategies use the
// model's.
struct RankPlacement {
  Device device;
  std::shared_ptr<Backend> backend;
};

// Places this rank: the ordinal (above), then the backend (no build support, driver or
// device: one line, before any rendezvous). Refuses what the comm backend cannot move: mpi
// with several GPU ranks (host buffers only), nccl on the host (device buffers only).
RankPlacement place_rank(DeviceSpec spec, const RankEnv& env, CommBackend comm);

// Connects this rank with `opts` (backend, transport, timeouts, agreement: the caller's)
// on the placed device: GPU or simulated-device ranks get the device transports.
std::unique_ptr<Communicator> connect_rank(const RankEnv& env, const RankPlacement& at, CommOptions opts);

}  // namespace rz
