// comm/options.h: what a communicator is asked for (CommOptions) and the limits on it.
//
// Its own header so that a transport, a backend or the flight recorder can take the options
// without including comm/factory.h, which includes all of them to connect a rank.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "base/memory.h"

namespace rz {

// The collective backends --comm selects: ringzero's own ring, the MPI library (mpirun), or
// NCCL (GPU ranks, device buffers; comm/nccl/nccl_communicator.h). kCommBackends[b] is b's name.
enum class CommBackend { ring, mpi, nccl };
inline constexpr const char* kCommBackends[] = {"ring", "mpi", "nccl"};
// How the ring's ranks reach each other: automatic (shm when all ranks share a host, else
// tcp), shm, tcp, or thread (ranks that are threads of one process: make_thread_communicators;
// never between processes). kCommTransports[t] is t's name; the first three are the ones
// connect_communicator accepts between processes (kProcessTransports).
enum class CommTransport { automatic, shm, tcp, thread };
inline constexpr const char* kCommTransports[] = {"auto", "shm", "tcp", "thread"};
inline constexpr const char* kProcessTransports[] = {"auto", "shm", "tcp"};

// The one name of each value, and its inverse (an unknown name is an error that lists the
// names).
const char* comm_backend_name(CommBackend b);
CommBackend parse_comm_backend(const std::string& name);
const char* comm_transport_name(CommTransport t);
// An on/off environment variable (RINGZERO_SHM_CMA, RINGZERO_CORE_SPREAD, RINGZERO_COMM_DEBUG):
// "1" true, "0" false, unset or empty `unset`; anything else an error naming it.
bool env_switch(const char* name, bool unset);
CommTransport parse_comm_transport(const std::string& name);

// The longest a wait may be told to last (11.6 days): every wait keeps a finite deadline.
inline constexpr double kMaxCommTimeoutS = 1e6;
// Entries the flight recorder keeps per rank (64 bytes each: 128 KiB).
inline constexpr size_t kFlightEntriesDefault = 2048;
// The bound on every wait unless told otherwise (CommOptions::timeout_s, PeerWatch::timeout_s).
inline constexpr double kCommTimeoutDefaultS = 300.0;

// Settings every rank of a job must share, as (name, value) text pairs in the caller's
// order ("--lr", "0.0006"); what they mean is the caller's business (train/config_agree.h).
using SettingsToAgree = std::vector<std::pair<std::string, std::string>>;

struct CommOptions {
  CommBackend backend = CommBackend::ring;               // ring (ringzero's own collectives) | mpi (under mpirun) | nccl (GPU ranks)
  CommTransport transport = CommTransport::automatic;   // ring: auto | shm | tcp between processes, thread for thread ranks
  double timeout_s = kCommTimeoutDefaultS;  // bound on every wait (at most kMaxCommTimeoutS); env RINGZERO_COMM_TIMEOUT overrides the default
  size_t segment_bytes = 1u << 20;  // pipeline segment size of the ring
  bool debug = false;               // fingerprint every collective across ranks (env RINGZERO_COMM_DEBUG=1)
  // The flight recorder (comm/debug/flight_recorder.h): the last flight_entries collectives of this
  // rank (0: none), written to flight_dir/rank<R>.json on a comm error, SIGUSR1, or when a
  // collective made no progress for flight_watchdog_s seconds (0: no watchdog).
  size_t flight_entries = kFlightEntriesDefault;
  std::string flight_dir;           // empty: env RINGZERO_FLIGHT_DIR, else no files
  double flight_watchdog_s = 0.0;
  // Where the buffers live: the rank's placed device (train/rank_setup.h's place_rank decides
  // it, ordinal included; comm only checks it against the devices it sees). cpu: host buffers.
  // cuda:K: GPU K, so the ring runs over its cuda transport (one host: CUDA IPC; several, or
  // tcp: staged through pinned host memory) and nccl on that GPU. sim:K: the simulated
  // device's (base/sim_device.h), where the cuda transport and nccl run over simulated calls.
  Device device;
  void* cuda_stream = nullptr;      // nccl, ring on a device: the cudaStream_t that produces the buffers; null: the legacy default stream
  bool trace_spans = true;          // ring: a --trace comm-track span per collective (off for the ring inside the simulated NCCL, whose collectives are NCCL's spans)
  // Compared across ranks at the rendezvous, with the world size, before any transport is
  // built: a difference is a one-line error on every rank naming the key and the ranks
  // (comm/rendezvous/agreement.h). Empty: only the world size is compared.
  SettingsToAgree agreement;
};

}  // namespace rz
