// cli/cmd_train.cpp: `ringzero train`: parse, validate, then either launch the local ranks
// (--nproc-per-node N > 1 or --nnodes > 1, when not already a rank) or train as one rank.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/check.h"
#include "comm/factory.h"
#include "launch/launch.h"
#include "cli/command.h"
#include "train/config.h"
#include "train/flight.h"
#include "train/loop.h"
#include "train/run_paths.h"
#include "train/save_dir_lock.h"
#include "viz/timeline.h"

namespace rz {
namespace {

// A process is already a rank when ringzero's launcher or one that rank_env_from_environment
// knows (torchrun, mpirun, srun) started it.
bool started_as_rank() { return launched_by_ringzero() || *rank_env_from_environment().launcher != 0; }

int run_train(int argc, char** argv) {
  TrainConfig cfg;
  if (!parse_train_args(argc, argv, cfg)) return 0;
  validate_config(cfg);
  check_train_paths(cfg);  // no output over an input, before anything is launched or written
  if (!cfg.trace.empty()) {  // a bad window fails before any launch
    const TraceSteps w = parse_trace_steps(cfg.trace_steps);
    RZ_CHECK(w.first <= cfg.steps, "trace_steps: %s starts after the run's last step %d", cfg.trace_steps.c_str(),
             cfg.steps);
  }
  // An explicit launch flag beside a launcher's environment (a stale RANK/WORLD_SIZE) is
  // refused: the environment would win, nothing be launched, and the rank wait out its timeout.
  std::vector<std::string> launch_flags;
  for (const char* key : {"nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port"})
    if (auto it = cfg.origins.find(key); it != cfg.origins.end() && it->second == TrainConfig::Origin::flag) {
      std::string flag = std::string("--") + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      launch_flags.push_back(flag + " " + get_config_value(cfg, key));
    }
  refuse_launch_flags_under_launcher(launch_flags);
  if ((cfg.nproc_per_node > 1 || cfg.nnodes > 1) && !started_as_rank()) {
    std::vector<std::string> child = {self_executable()};
    for (int i = 0; i < argc; ++i) child.emplace_back(argv[i]);
    LaunchOptions lo;
    lo.nproc_per_node = cfg.nproc_per_node;
    lo.nnodes = cfg.nnodes;
    lo.node_rank = cfg.node_rank;
    lo.master_addr = cfg.master_addr;
    lo.master_port = cfg.master_port;
    // One job per save-dir, held from here until the launcher and its last rank are gone
    // (train/save_dir_lock.h); taken before any rank touches the directory.
    const SaveDirLock lock = SaveDirLock::for_launcher(cfg.save_dir, cfg.node_rank);
    // Every rank writes its flight record into one directory; when the job fails that way,
    // the doctor's summary follows the launcher's own line (comm/debug/flight_doctor.h).
    const std::string flight_dir = resolve_flight_dir(cfg);
    setenv("RINGZERO_FLIGHT_DIR", flight_dir.c_str(), 1);
    const double launched_at = unix_now();
    const int rc = launch_local_ranks(child, lo);
    if (rc != 0) print_flight_summary(flight_dir, launched_at);
    return rc;
  }
  const SaveDirLock lock = SaveDirLock::for_rank(cfg.save_dir, rank_env_from_environment().rank);
  return run_training(cfg);
}

const RegisterCommand kRegister({"train", "train a GPT-2 model (ddp, zero1, zero2, zero3) on one or many ranks", run_train, 10});

}  // namespace
}  // namespace rz
