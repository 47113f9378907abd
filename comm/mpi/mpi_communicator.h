// comm/mpi/mpi_communicator.h: the Communicator over MPI (`--comm mpi`), for clusters that
// already run mpirun.
//
// The same promises as the ring (communicator.h): the same shards (shard_of), avg divides
// the finished sum by N in fp32 on the owner, async calls run in issue order on this
// rank's comm thread, every wait is bounded by the timeout, and an error names the rank
// and the collective. What differs: MPI chooses its own algorithm and reduction order, so
// fp32 results agree with the ring's to rounding, not bitwise; the byte counters hold what
// a bandwidth-optimal algorithm moves per rank ((N-1)/N of the tensor per phase, as the
// ring does), since MPI does not report what it sent.
//
// Each collective is one non-blocking MPI call (MPI_Iallreduce, MPI_Ireduce_scatter,
// MPI_Iallgatherv, MPI_Ibcast, MPI_Ibarrier) that the executing thread (the caller for
// blocking calls, the comm thread for async ones) progresses with MPI_Test until done,
// yielding between tests. Only one thread calls MPI at a time (MPI_THREAD_SERIALIZED).
// bf16 travels as 16-bit words and is summed by a user-defined MPI_Op (fp32 add, RNE).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/options.h"
#include "comm/rank_env.h"

namespace rz {

// Initializes MPI (once per process; finalized when the last communicator goes) and
// returns a communicator over all of mpirun's ranks. env, read from the environment,
// must agree with MPI's rank and size (it does under mpirun: OMPI_COMM_WORLD_*).
std::unique_ptr<Communicator> connect_mpi_communicator(const RankEnv& env, const CommOptions& opts);

}  // namespace rz
