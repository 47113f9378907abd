// launch/launch.h: ringzero as its own launcher (no torchrun).
//
// `ringzero train --nproc-per-node N ...` (and `comm-bench --nproc N`) re-execute this
// executable N times. Each child gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the job token RINGZERO_JOB_TOKEN that the
// rendezvous store demands, RINGZERO_LAUNCHED=1 (so it does not launch again) and, unless
// the user set it, OMP_NUM_THREADS = cores / N so ranks do not oversubscribe the CPU.
//
// The launcher watches its children. Their stderr is read through pipes and echoed line by
// line as "[rank R] ..."; stdout is inherited untouched (rank 0's live progress line).
// When a child fails (non-zero exit or a signal) the launcher stops the others (SIGTERM,
// then SIGKILL after a grace period), prints which rank failed and its last error line,
// and returns that rank's status (the earliest failure, not a knock-on one). Ctrl-C (SIGINT)
// or SIGTERM to the launcher is passed on to the ranks (the same signal, marked as the
// launcher's: base/stop_signal.h's forward_stop) and the launcher waits for them: a training
// rank finishes its step, saves and exits, even when the signal reached it directly too. A
// second request (past base/stop_signal.h's repeat window) stops them at once. A launcher
// that dies takes its ranks with it (PR_SET_PDEATHSIG). At most 4 ranks per core are
// started, and starting stops at the first signal or failure.
#pragma once

#include <string>
#include <vector>

namespace rz {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0: pick a free port (single node only)
  std::string job_token;      // empty: RINGZERO_JOB_TOKEN from the environment, else random (single node)
  double stop_grace_s = 5.0;  // SIGTERM -> SIGKILL delay when stopping the other ranks
  // SIGKILL this long after SIGINT/SIGTERM to the launcher was passed on: ranks finish their
  // step and save first. A second request is passed on as "stop now", SIGKILL stop_grace_s later.
  double signal_grace_s = 300.0;
};

// Runs child_argv (child_argv[0] is the program to exec, e.g. self_executable()) once per
// local rank and waits for all of them. Returns 0 when every rank exited 0, else the
// status of the first rank that failed (its exit code, or 128 + signal).
int launch_local_ranks(const std::vector<std::string>& child_argv, const LaunchOptions& opts);

// True inside a process started by launch_local_ranks.
bool launched_by_ringzero();

// Launch flags (`given`, as typed: "--nproc-per-node 2") beside a launcher's environment that
// already makes this process a rank (torchrun's RANK/WORLD_SIZE, mpirun's OMPI_COMM_WORLD_*,
// srun's SLURM_* with several tasks; a stale export in a shell is the usual case): the
// environment would win and nothing be launched. Throws one line naming the flags and the
// variables to unset; nothing when `given` is empty or ringzero's own launcher started this
// process (its ranks are re-run with the flags).
void refuse_launch_flags_under_launcher(const std::vector<std::string>& given);

// Path of the running executable (/proc/self/exe).
std::string self_executable();

// A TCP port that was free on host's address a moment ago (found by binding that address
// only: a loopback job never listens on every interface, not even for this).
int pick_free_port(const std::string& host = "127.0.0.1");

}  // namespace rz
