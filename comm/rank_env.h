// comm/rank_env.h: who this process is in the job (rank, world size, rendezvous address,
// job token), as the launcher that started it says.
#pragma once

#include <string>
#include <vector>

namespace rz {

// The identity of this process as a rank, read from the environment. The rank, world size
// and local rank all come from the first launcher whose variables are set:
//   torchrun (and ringzero's own launcher)  RANK, WORLD_SIZE, LOCAL_RANK
//   mpirun (Open MPI)                       OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK
//   srun (SLURM)                            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, only
//                                           when SLURM_NTASKS > 1 (a one-task allocation's
//                                           shell is not a job of ranks: ringzero may
//                                           launch its own there)
// plus MASTER_ADDR, MASTER_PORT and the job token RINGZERO_JOB_TOKEN. With none of them
// set: a single rank (rank 0 of 1) and launcher "". Bad values are errors naming the
// variable.
struct RankEnv {
  const char* launcher = "";  // "torchrun", "mpirun", "srun", or "" when no launcher started this process
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string job_token;
};
RankEnv rank_env_from_environment();

// The variables by which env.launcher made this process a rank, those set, as "NAME=value"
// (torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; mpirun: OMPI_COMM_WORLD_*; srun:
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). Empty when no launcher did.
std::vector<std::string> launcher_variables(const RankEnv& env);

// The device (GPU, or the simulated device's) a rank of env runs on among `visible` ones: the
// one asked for when requested >= 0 (it must be below visible: else an error that starts with
// `what` and names the rank and kind:requested), else LOCAL_RANK modulo visible, so the
// ranks of a host spread over its devices.
int rank_device(const RankEnv& env, int requested, int visible, const char* what, const char* kind);

}  // namespace rz
