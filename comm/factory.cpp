// comm/factory.cpp: connect_communicator (a rank joins its job) and the stand-ins for the backends a build lacks.
#include "comm/factory.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "comm/transport/device_ring.h"
#include "comm/debug/fault_injection.h"
#include "comm/rendezvous/agreement.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/nccl/nccl_calls.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/ring_communicator.h"
#include "comm/transport/transports.h"

namespace rz {
namespace {

std::string host_identity() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

// Where rank 0's store listens: the master address itself when it is an IPv4 literal or a
// loopback name (so a loopback job never listens on the network); all interfaces for
// another host name, whose local resolution may differ from the other nodes' (127.0.1.1).
// The host ring inside the simulated NCCL (comm/nccl/nccl_calls_sim.cpp) is NCCL's machinery,
// not a second communicator of the rank: its collectives are already the NCCL
// communicator's flight entries and trace spans, so it keeps neither of its own (its
// rank<R>.json would overwrite the NCCL one's).
CommOptions sim_nccl_ring_options(const CommOptions& opts) {
  CommOptions o = opts;
  o.device = Device{};  // host buffers: the ring under the simulated NCCL moves host copies
  o.flight_entries = 0;
  o.flight_watchdog_s = 0.0;
  o.trace_spans = false;
  return o;
}

std::string store_bind_host(const std::string& master_addr) {
  in_addr a{};
  if (inet_pton(AF_INET, master_addr.c_str(), &a) == 1) return master_addr;
  if (master_addr == "localhost") return "127.0.0.1";
  return "";
}

}  // namespace

#ifndef RINGZERO_HAVE_MPI
std::unique_ptr<Communicator> connect_mpi_communicator(const RankEnv&, const CommOptions&) {
  RZ_FAIL("comm mpi: this ringzero was built without MPI (install openmpi-bin libopenmpi-dev and reconfigure; "
          "CMake option RINGZERO_MPI)");
}
#endif

// The nccl and cuda-transport entry points come from the provider linked into the
// executable (comm/CMakeLists.txt): the CUDA runtime's (transport/cuda_ring.cpp,
// nccl/nccl_calls_cuda.cpp), the CUDA-on-CPU emulator's in tests, or none
// (transport/cuda_ring_none.cpp, nccl/nccl_calls_none.cpp).

// The host ring between processes (shm on one host, else tcp) over the claimed store.
static std::unique_ptr<RingCommunicator> connect_host_ring(const RankEnv& env, const CommOptions& opts,
                                                           StoreClient& store) {
  CommTransport transport = opts.transport;
  if (transport == CommTransport::automatic) {
    transport = CommTransport::shm;
    std::string mine = host_identity();
    for (int r = 0; r < env.world_size; ++r)
      if (store.get(strfmt("host/%d", r)) != mine) transport = CommTransport::tcp;
  }
  std::unique_ptr<RingChannel> ch = transport == CommTransport::shm ? connect_shm_channel(env, opts, store)
                                                                    : connect_tcp_channel(env, opts, store);
  return std::make_unique<RingCommunicator>(env.rank, env.world_size, comm_transport_name(transport), std::move(ch),
                                            opts);
}

namespace {

// How connect_communicator runs a rank's collectives besides mpi (which brings its own ranks
// and rendezvous): the backend, and whether the buffers are on a GPU or on the simulated
// device (--device sim), which stands in for the GPU: nccl then runs its own logic over the
// simulated calls on a host ring, the cuda transport over a simulated link.
enum class CommPath { nccl, sim_nccl, host_ring, cuda_ring, sim_cuda_ring };

CommPath comm_path_for(const CommOptions& opts) {
  const bool sim = opts.device.kind == DeviceKind::sim;
  if (opts.backend == CommBackend::nccl) return sim ? CommPath::sim_nccl : CommPath::nccl;
  if (opts.device.is_cpu()) return CommPath::host_ring;
  return sim ? CommPath::sim_cuda_ring : CommPath::cuda_ring;
}

// What this build or the options rule out, each in one line before any rendezvous.
void check_path(const RankEnv& env, const CommOptions& opts, CommPath path) {
  if (path == CommPath::nccl) {
    const std::string why = nccl_unavailable();
    RZ_CHECK(why.empty(), "comm nccl: %s", why.c_str());
  }
  RZ_CHECK(path == CommPath::nccl || opts.transport != CommTransport::thread,
           "comm transport: expected auto, shm or tcp between processes, found '%s' (thread is only for ranks "
           "that are threads of one process)",
           comm_transport_name(opts.transport));
  RZ_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size,
           "rank %d of world size %d is out of range", env.rank, env.world_size);
  if (path == CommPath::host_ring) {  // a bad RINGZERO_SHM_CMA or RINGZERO_CORE_SPREAD, whichever transport
    shm_cma_allowed();
    core_spread_allowed();
  }
  if (path == CommPath::cuda_ring) {
    const std::string why = cuda_ring_unavailable();
    RZ_CHECK(why.empty(), "comm ring with GPU buffers: %s", why.c_str());
  }
}

// The cuda transport's device side: the GPU's, or the simulated device's.
std::shared_ptr<DeviceLink> device_link(const RankEnv& env, const CommOptions& opts, CommPath path,
                                        size_t inbox_bytes) {
  return path == CommPath::sim_cuda_ring ? make_sim_link(env, opts, inbox_bytes)
                                         : make_cuda_link(env, opts, inbox_bytes);
}

// A ring of one rank: its collectives are local copies.
std::unique_ptr<RingCommunicator> single_rank_ring(const CommOptions& opts, const char* transport,
                                                   std::shared_ptr<DeviceLink> link = nullptr) {
  auto comm = std::make_unique<RingCommunicator>(0, 1, transport, nullptr, opts);
  if (link) comm->set_device(std::move(link));
  return comm;
}

std::unique_ptr<Communicator> connect_single_rank(const RankEnv& env, const CommOptions& opts, CommPath path) {
  switch (path) {
    case CommPath::nccl: return make_nccl_communicator(env, opts, nullptr, nullptr);
    case CommPath::sim_nccl:
      return make_nccl_communicator(env, opts, nullptr, nullptr,
                                    make_sim_nccl_calls(single_rank_ring(sim_nccl_ring_options(opts), "shm")));
    case CommPath::host_ring: return single_rank_ring(opts, opts.transport == CommTransport::tcp ? "tcp" : "shm");
    case CommPath::cuda_ring:
    case CommPath::sim_cuda_ring: return single_rank_ring(opts, "cuda", device_link(env, opts, path, 0));
  }
  RZ_FAIL("comm: no connection path %d", static_cast<int>(path));
}

// The ring over GPU (or simulated device) buffers. One host: device to device through CUDA
// IPC. Several hosts (or --transport tcp): staged through pinned host memory over tcp.
std::unique_ptr<RingCommunicator> connect_device_ring(const RankEnv& env, const CommOptions& opts,
                                                      StoreClient& store, CommPath path) {
  bool one_host = opts.transport != CommTransport::tcp;
  const std::string mine = host_identity();
  for (int r = 0; r < env.world_size && one_host; ++r) one_host = store.get(strfmt("host/%d", r)) == mine;
  RZ_CHECK(one_host || opts.transport != CommTransport::shm,
           "comm ring with GPU buffers: --transport shm, but the ranks run on several hosts (use auto or tcp)");
  if (!one_host) {
    std::shared_ptr<DeviceLink> link = device_link(env, opts, path, 0);
    auto comm = std::make_unique<RingCommunicator>(
        env.rank, env.world_size, "cuda-tcp", make_staging_ring_channel(connect_tcp_channel(env, opts, store), link),
        opts);
    comm->set_device(link);
    return comm;
  }
  std::shared_ptr<DeviceLink> link = device_link(env, opts, path, size_t(cuda_inbox_slots()) * opts.segment_bytes);
  auto comm = std::make_unique<RingCommunicator>(env.rank, env.world_size, "cuda",
                                                 connect_cuda_channel(env, opts, store, link, opts.segment_bytes),
                                                 opts);
  comm->set_device(link);
  return comm;
}

// A ring communicator that keeps rank 0's store serving for as long as it lives.
std::unique_ptr<Communicator> keeping(std::unique_ptr<RingCommunicator> comm, std::shared_ptr<StoreServer> server) {
  if (server) comm->keep_alive(std::move(server));
  return comm;
}

std::unique_ptr<Communicator> connect(const RankEnv& env, const CommOptions& options) {
  CommOptions opts = resolve_comm_options(options);
  if (opts.backend == CommBackend::mpi) {
    // No store: mpirun's world size is every rank's, and the settings (when there are any)
    // are compared through the communicator, its first collective.
    std::unique_ptr<Communicator> comm = connect_mpi_communicator(env, opts);
    if (!opts.agreement.empty()) agree_by_collective(*comm, opts.agreement);
    return comm;
  }
  const CommPath path = comm_path_for(opts);
  check_path(env, opts, path);
  const bool device_ring = path == CommPath::cuda_ring || path == CommPath::sim_cuda_ring;
  if (device_ring && opts.segment_bytes == CommOptions{}.segment_bytes) opts.segment_bytes = kCudaDefaultSegmentBytes;
  if (env.world_size == 1) return connect_single_rank(env, opts, path);
  RZ_CHECK(!env.job_token.empty(),
           "RINGZERO_JOB_TOKEN is not set: every rank must know the same job token to join the rendezvous store "
           "(ringzero's launcher sets it; with torchrun or srun export one random value to all ranks)");
  // The token is an HMAC key (comm/rendezvous/job_auth.h), never sent: any length works; the bound only
  // keeps a pasted file out.
  RZ_CHECK(env.job_token.size() <= 1024, "RINGZERO_JOB_TOKEN: expected at most 1024 characters, found %zu",
           env.job_token.size());

  // The store listens on the master address only (a loopback job stays off the network).
  // The nonce (set by ringzero's launcher for a single-node job) keeps another job's ranks
  // out; the claim refuses a second process with this rank (torchrun or srun jobs too).
  const char* nonce_env = std::getenv("RINGZERO_JOB_NONCE");
  const std::string nonce = nonce_env != nullptr ? nonce_env : "";
  std::shared_ptr<StoreServer> server;
  if (env.rank == 0) server = std::make_shared<StoreServer>(store_bind_host(env.master_addr), env.master_port, env.job_token, nonce);
  StoreClient store(env.master_addr, env.master_port, env.job_token, opts.timeout_s, nonce);
  std::string holder;
  const std::string me = strfmt("pid %d on %s", static_cast<int>(getpid()), host_identity().c_str());
  RZ_CHECK(store.claim(strfmt("rank/%d", env.rank), me, &holder),
           "rendezvous: rank %d is already taken in the store at %s:%d (by %s): two jobs share MASTER_PORT and "
           "RINGZERO_JOB_TOKEN, or two processes were given RANK=%d",
           env.rank, env.master_addr.c_str(), env.master_port, holder.c_str(), env.rank);
  // The world size and the settings every rank must share, before anything waits for a peer
  // that a rank of another world size would never send (comm/rendezvous/agreement.h).
  agree_at_rendezvous(store, env.rank, RankSettings{env.world_size, opts.agreement}, opts.timeout_s);
  // Every ring (the simulated NCCL's host ring too) learns from the store which ranks share
  // this host; NCCL finds that out itself.
  if (path != CommPath::nccl) store.set(strfmt("host/%d", env.rank), host_identity());

  switch (path) {
    case CommPath::nccl: return make_nccl_communicator(env, opts, &store, server);
    case CommPath::sim_nccl:  // the simulated NCCL's collectives run on a host ring of these processes
      return make_nccl_communicator(env, opts, &store, server,
                                    make_sim_nccl_calls(connect_host_ring(env, sim_nccl_ring_options(opts), store)));
    case CommPath::host_ring: return keeping(connect_host_ring(env, opts, store), server);
    case CommPath::cuda_ring:
    case CommPath::sim_cuda_ring: return keeping(connect_device_ring(env, opts, store, path), server);
  }
  RZ_FAIL("comm: no connection path %d", static_cast<int>(path));
}

}  // namespace

std::unique_ptr<Communicator> connect_communicator(const RankEnv& env, const CommOptions& options) {
  return with_test_faults(connect(env, options));  // a test hook; nothing unless RINGZERO_TEST_FAULT is set
}

// The thread transport's ranks (comm/transport/thread.cpp) as communicators of one process.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int nranks, const CommOptions& options) {
  RZ_CHECK(nranks >= 1 && nranks <= 4096, "thread communicators: expected 1..4096 ranks, found %d", nranks);
  const CommOptions opts = resolve_comm_options(options);
  std::vector<std::unique_ptr<Communicator>> comms;
  if (nranks == 1) {
    comms.push_back(std::make_unique<RingCommunicator>(0, 1, "thread", nullptr, opts));
    return comms;
  }
  auto channels = make_thread_channels(nranks, opts);
  for (int r = 0; r < nranks; ++r)
    comms.push_back(std::make_unique<RingCommunicator>(r, nranks, "thread", std::move(channels[r]), opts));
  return comms;
}

}  // namespace rz
