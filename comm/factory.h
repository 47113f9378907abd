// comm/factory.h: how a rank gets its Communicator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace rz {

// The transports connect_communicator accepts between processes (auto = shm when all ranks
// share a host, else tcp). `thread` is only for ranks that are threads of one process
// (make_thread_communicators).
inline constexpr const char* kProcessTransports[] = {"auto", "shm", "tcp"};
// The collective backends --comm selects: ringzero's own ring, the MPI library (mpirun), or
// NCCL (GPU ranks, device buffers; comm/nccl_communicator.h).
inline constexpr const char* kCommBackends[] = {"ring", "mpi", "nccl"};

// The longest a wait may be told to last (11.6 days): every wait keeps a finite deadline.
inline constexpr double kMaxCommTimeoutS = 1e6;
// Entries the flight recorder keeps per rank (64 bytes each: 128 KiB).
inline constexpr size_t kFlightEntriesDefault = 2048;

struct CommOptions {
  std::string backend = "ring";     // one of kCommBackends: ring (ringzero's own collectives) | mpi (under mpirun) | nccl (GPU ranks)
  std::string transport = "auto";   // one of kProcessTransports, or thread
  double timeout_s = 300.0;         // bound on every wait (at most kMaxCommTimeoutS); env RINGZERO_COMM_TIMEOUT overrides the default
  size_t segment_bytes = 1u << 20;  // pipeline segment size of the ring
  bool debug = false;               // fingerprint every collective across ranks (env RINGZERO_COMM_DEBUG=1)
  // The flight recorder (comm/flight_recorder.h): the last flight_entries collectives of this
  // rank (0: none), written to flight_dir/rank<R>.json on a comm error, SIGUSR1, or when a
  // collective made no progress for flight_watchdog_s seconds (0: no watchdog).
  size_t flight_entries = kFlightEntriesDefault;
  std::string flight_dir;           // empty: env RINGZERO_FLIGHT_DIR, else no files
  double flight_watchdog_s = 0.0;
  int cuda_device = -1;             // nccl, ring with device_buffers: the GPU of this rank; -1: local rank modulo the visible GPUs
  void* cuda_stream = nullptr;      // nccl, ring with device_buffers: the cudaStream_t that produces the buffers; null: the legacy default stream
  bool device_buffers = false;      // ring: the buffers are GPU memory, so the ring runs over its cuda transport (one host: CUDA IPC; several, or tcp: staged through pinned host memory)
  bool sim_device = false;          // nccl, ring with device_buffers: the buffers are the simulated device's (--device sim, base/sim_device.h): the cuda transport and nccl run over their simulated calls
  bool trace_spans = true;          // ring: a --trace comm-track span per collective (off for the ring inside the simulated NCCL, whose collectives are NCCL's spans)
};

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

// Connects this process to the others. backend nccl: rendezvous as for the ring, then NCCL
// with its unique id through the store (a build without NCCL, or no GPU, is a one-line
// error before any rendezvous). backend mpi: through the MPI library (ranks from
// mpirun; transport is ignored; see comm/mpi_communicator.h). backend ring: rendezvous at master_addr:master_port (rank 0
// serves the store), then builds the ring over the chosen transport. world_size 1 gives
// a communicator whose collectives are local copies.
std::unique_ptr<Communicator> connect_communicator(const RankEnv& env, const CommOptions& opts);

// N ranks as threads of this process (tests, comm-trace): element r is rank r's
// communicator; each must be driven from its own thread.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int nranks,
                                                                     const CommOptions& opts);

}  // namespace rz
