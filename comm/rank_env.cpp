// comm/rank_env.cpp: a rank's identity from the environment its launcher set.
#include "comm/rank_env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "base/check.h"

namespace rz {
namespace {

// The first of names that is set, parsed as an int in [lo, hi]; a bad value is an error.
bool env_int(std::initializer_list<const char*> names, int lo, int hi, int& out) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v == nullptr || *v == 0) continue;
    char* end = nullptr;
    errno = 0;
    long x = std::strtol(v, &end, 10);
    RZ_CHECK(errno == 0 && *end == 0 && x >= lo && x <= hi, "environment %s: expected an integer in %d..%d, found '%s'",
             n, lo, hi, v);
    out = static_cast<int>(x);
    return true;
  }
  return false;
}

// The launchers whose variables make a process a rank, in the order they are looked for.
struct Launcher {
  const char* name;
  const char *rank, *size, *local_rank, *local_size;
};
constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

}  // namespace

std::vector<std::string> launcher_variables(const RankEnv& env) {
  std::vector<std::string> out;
  for (const Launcher& l : kLaunchers) {
    if (std::strcmp(l.name, env.launcher) != 0) continue;
    for (const char* n : {l.rank, l.size, l.local_rank, l.local_size})
      if (n != nullptr && std::getenv(n) != nullptr) out.push_back(std::string(n) + "=" + std::getenv(n));
  }
  return out;
}

RankEnv rank_env_from_environment() {
  RankEnv e;
  for (const Launcher& l : kLaunchers) {
    if (!env_int({l.rank}, 0, 1 << 20, e.rank)) continue;
    env_int({l.size}, 1, 1 << 20, e.world_size);
    env_int({l.local_rank}, 0, 1 << 20, e.local_rank);
    if (std::strcmp(l.name, "srun") == 0 && e.world_size == 1) {
      e.rank = e.local_rank = 0;  // a one-task allocation: not a job of ranks
      break;
    }
    e.launcher = l.name;
    break;
  }
  env_int({"MASTER_PORT"}, 1, 65535, e.master_port);
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != 0) e.master_addr = a;
  if (const char* t = std::getenv("RINGZERO_JOB_TOKEN"); t != nullptr) e.job_token = t;
  RZ_CHECK(e.rank < e.world_size, "environment: RANK %d is not below WORLD_SIZE %d", e.rank, e.world_size);
  return e;
}

int rank_device(const RankEnv& env, int requested, int visible, const char* what, const char* kind) {
  if (requested >= 0) {
    RZ_CHECK(requested < visible, "%s: rank %d: device %s:%d asked for, but %d device(s) are visible", what, env.rank,
             kind, requested, visible);
    return requested;
  }
  return env.local_rank % visible;
}

}  // namespace rz
