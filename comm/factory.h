// comm/factory.h: how a rank gets its Communicator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/options.h"
#include "comm/rank_env.h"

namespace rz {

// Connects this process to the others. backend nccl: rendezvous as for the ring, then NCCL
// with its unique id through the store (a build without NCCL, or no GPU, is a one-line
// error before any rendezvous). backend mpi: through the MPI library (ranks from
// mpirun; transport is ignored; see comm/mpi/mpi_communicator.h). backend ring: rendezvous at master_addr:master_port (rank 0
// serves the store), then builds the ring over the chosen transport. world_size 1 gives
// a communicator whose collectives are local copies.
std::unique_ptr<Communicator> connect_communicator(const RankEnv& env, const CommOptions& opts);

// N ranks as threads of this process (tests, comm-trace): element r is rank r's
// communicator; each must be driven from its own thread.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int nranks,
                                                                     const CommOptions& opts);

}  // namespace rz
