// cli/cmd_train.cpp: `ringzero train`: parse, validate, then either launch the local ranks
// (--nproc-per-node N > 1 or --nnodes > 1, when not already a rank) or train as one rank.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/check.h"
#include "cli/command.h"
#include "train/config.h"
#include "train/flight.h"
#include "train/loop.h"
#include "train/rank_setup.h"
#include "train/run_paths.h"
#include "train/save_dir_lock.h"
#include "viz/timeline.h"

namespace rz {
namespace {

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
  RankLaunch job{cfg.nproc_per_node, cfg.nnodes, cfg.node_rank, cfg.master_addr, cfg.master_port, {}};
  for (const char* key : {"nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port"})
    if (auto it = cfg.origins.find(key); it != cfg.origins.end() && it->second == TrainConfig::Origin::flag) {
      std::string flag = std::string("--") + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      job.given_flags.push_back(flag + " " + get_config_value(cfg, key));
    }
  if (should_launch(job)) {
    // One job per save-dir, held from here until the launcher and its last rank are gone
    // (train/save_dir_lock.h); taken before any rank touches the directory.
    const SaveDirLock lock = SaveDirLock::for_launcher(cfg.save_dir, cfg.node_rank);
    // Every rank writes its flight record into one directory; when the job fails that way,
    // the doctor's summary follows the launcher's own line (comm/debug/flight_doctor.h).
    const std::string flight_dir = resolve_flight_dir(cfg);
    setenv("RINGZERO_FLIGHT_DIR", flight_dir.c_str(), 1);
    const double launched_at = unix_now();
    const int rc = launch_ranks(job, std::vector<std::string>(argv, argv + argc));
    if (rc != 0) print_flight_summary(flight_dir, launched_at);
    return rc;
  }
  const SaveDirLock lock = SaveDirLock::for_rank(cfg.save_dir, rank_env_from_environment().rank);
  return run_training(cfg);
}

const RegisterCommand kRegister({"train", "train a GPT-2 model (ddp, zero1, zero2, zero3) on one or many ranks", run_train, 10});

}  // namespace
}  // namespace rz
