// cli/cmd_comm_bench.cpp: `ringzero comm-bench`, nccl-tests for ringzero's own ring.
//
// Spawns --nproc-per-node (--nproc) ranks itself (launch/launch.h) unless --transport thread, then for each
// size from --min-bytes to --max-bytes (x2 each step) times --iters collectives after
// --warmup-iters untimed ones, and checks one more run whose answer has a closed form (rank r,
// element i holds a small integer, so every sum is exact in fp32 and bf16). Columns and
// bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw x 2(N-1)/N for
// all_reduce and x (N-1)/N for reduce_scatter and all_gather. "bytes" is the full tensor
// (all_gather's output, reduce_scatter's input). Time is the slowest rank's average.
//
// --device cuda (with --comm nccl, or --comm ring over its cuda transport): the buffers are on the GPU (inputs uploaded and the
// checked result downloaded outside the timed loop), and the run first measures this GPU's
// device-to-device copy bandwidth; each row then adds the bound: the bytes this GPU's ranks
// move (bytes sent per rank x ranks on the GPU) over that bandwidth, and time's % of it.
// The GPU path's status is RZ_GPU_STATUS (kernels/backend.h), as --help says; docs/gpu-comm.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "base/host_memory.h"
#include "data/output_paths.h"
#include "comm/transport/device_ring.h"
#include "comm/factory.h"
#include "comm/nccl/nccl_communicator.h"
#include "kernels/backend.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "cli/comm_precision.h"
#include "train/config.h"
#include "train/rank_setup.h"

namespace rz {
namespace {

struct BenchArgs {
  std::string op = "all_reduce";
  CommTransport transport = CommTransport::automatic;
  // --nproc-per-node (--nproc), --comm, --comm-timeout, --comm-debug, --flight-entries and
  // --flight-dir: rows of train's settings table, with comm-bench's 2 ranks by default.
  TrainConfig settings = [] {
    TrainConfig c;
    c.nproc_per_node = 2;
    return c;
  }();
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  std::string dtype = "fp32";
  std::string redop = "sum";
  int iters = 20;
  int warmup_iters = 5;
  bool json = false;
  std::string segment = "1M";
  std::string device = "cpu";
  std::string host_memory = "auto";
  bool check_precision = false;
  PrecisionCheckArgs precision;
};

// A --min-bytes / --max-bytes / --segment-bytes value (parse_byte_size's grammar: 64M is MiB,
// 64MB is 64e6), below 64 GiB; a fraction of a byte is dropped.
size_t bench_bytes(const std::string& s, const char* flag) {
  const double v = parse_byte_size(s, flag);
  RZ_CHECK(v < 0x1p36, "%s: expected a byte count between 0 and 64G, found '%s'", flag, s.c_str());
  return static_cast<size_t>(v);
}

float input_value(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 23) - 11); }

struct Typed {
  DType dt;
  std::vector<unsigned char> b;
  Typed(DType d, size_t n) : dt(d), b(n * dtype_size(d) + 64) {}
  void* data() { return b.data(); }
  void set(size_t i, float v) {
    if (dt == DType::f32) std::memcpy(&b[i * 4], &v, 4);
    else { bf16 h = float_to_bf16(v); std::memcpy(&b[i * 2], &h, 2); }
  }
  float get(size_t i) const {
    if (dt == DType::f32) { float v; std::memcpy(&v, &b[i * 4], 4); return v; }
    bf16 h; std::memcpy(&h, &b[i * 2], 2); return bf16_to_float(h);
  }
};

// Where the benchmark's tensors live: host memory, shared host memory that the peers read
// in place (Buffer::allocate_shared, as zero1/zero2's parameters when the communicator
// reads it: --host-memory auto), or GPU memory through a backend (dev).
struct BenchMemory {
  Backend* dev = nullptr;
  double copy_gbps = 0;  // device-to-device copy bandwidth measured in this run (dev only)
  bool shared = false;   // host tensors in shared memory (a twin; dev == nullptr)

  // A buffer for n elements: the host one itself, or a device / shared twin (at least 1 byte).
  void* place(Typed& host, size_t n, Buffer<unsigned char>& twin) const {
    if (dev == nullptr && !shared) return host.data();
    if (dev == nullptr) twin.allocate_shared(MemTag::comm, std::max<size_t>(n * dtype_size(host.dt), 1));
    else twin.allocate(MemTag::comm, std::max<size_t>(n * dtype_size(host.dt), 1), dev->device());
    return twin.data();
  }
  void upload(void* d, Typed& host, size_t n) const {
    if (dev != nullptr && n > 0) dev->copy_from_host(d, host.data(), n * dtype_size(host.dt));
    else if (shared && n > 0) std::memcpy(d, host.data(), n * dtype_size(host.dt));
  }
  void download(Typed& host, const void* d, size_t n) const {
    if (dev != nullptr && n > 0) dev->copy_to_host(host.data(), d, n * dtype_size(host.dt));
    else if (shared && n > 0) std::memcpy(host.data(), d, n * dtype_size(host.dt));
  }
  void ready() const {
    if (dev != nullptr) dev->synchronize();
  }
};

// bytes / seconds of dev->copy between two device buffers of `bytes`, best of 5.
double measure_copy_gbps(Backend& dev, size_t bytes) {
  Buffer<unsigned char> a(MemTag::comm, bytes, dev.device()), b(MemTag::comm, bytes, dev.device());
  dev.copy(b.data(), a.data(), bytes);
  dev.synchronize();
  double best = 0;
  for (int k = 0; k < 5; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    dev.copy(b.data(), a.data(), bytes);
    dev.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, double(bytes) / s / 1e9);
  }
  return best;
}

// One row per collective, the one place comm-bench names them (nccl-tests keeps one small
// table of hooks per collective): its --op name, its bus-bandwidth factor, how to run it on
// the full tensor and this rank's shard, and how its checked run is filled and judged.
// A reducing collective's checked inputs are input_value(r, i) in the full tensor (the
// answer: their sum or mean); AllGather's are (offset + i) % 241 in each shard (the
// answer: i % 241 in the full tensor, which starts at -1).
struct Collective {
  const char* name;
  double (*bus_factor)(int N);  // busbw = algbw x this (nccl-tests doc/PERFORMANCE.md)
  void (*run)(Communicator& c, void* full, void* shard, size_t count, DType dt, ReduceOp redop);
  bool reduces;          // the answer is a reduction of input_value (else AllGather's concatenation)
  bool answer_in_shard;  // rank r's shard holds its answer (ReduceScatter), else the full tensor
};

const Collective kCollectives[] = {
    {"all_reduce", [](int N) { return 2.0 * (N - 1) / N; },
     [](Communicator& c, void* full, void*, size_t count, DType dt, ReduceOp redop) { c.all_reduce(full, count, dt, redop); },
     true, false},
    {"reduce_scatter", [](int N) { return double(N - 1) / N; },
     [](Communicator& c, void* full, void* shard, size_t count, DType dt, ReduceOp redop) {
       c.reduce_scatter(full, shard, count, dt, redop);
     },
     true, true},
    {"all_gather", [](int N) { return double(N - 1) / N; },
     [](Communicator& c, void* full, void* shard, size_t count, DType dt, ReduceOp) { c.all_gather(shard, full, count, dt); },
     false, false},
};

// The rows' names, for --help and errors: "all_reduce, reduce_scatter, all_gather".
std::string collective_names() {
  std::string out;
  for (const Collective& k : kCollectives) out += std::string(out.empty() ? "" : ", ") + k.name;
  return out;
}

// --op's row (the flag's check already refused any other name).
const Collective& collective(const std::string& op) {
  for (const Collective& k : kCollectives)
    if (op == k.name) return k;
  RZ_FAIL("--op: expected %s, found '%s'", collective_names().c_str(), op.c_str());
}

// Rank 0's lines above the table (not with --json): the GPU's copy bandwidth, the run, the
// nccl-tests column heads.
void print_table_header(Communicator& c, const BenchArgs& a, const BenchMemory& mem, size_t seg, int ranks_on_gpu) {
  const bool dev = mem.dev != nullptr;
  if (dev)
    std::printf("# %s: device-to-device copy %.1f GB/s (measured in this run); %d rank(s) on this GPU\n",
                mem.dev->name().c_str(), mem.copy_gbps, ranks_on_gpu);
  std::printf("# ringzero comm-bench: %s, %d ranks, transport %s, %s %s, segment %zu B, %d iters after %d warmup\n",
              a.op.c_str(), c.size(), c.transport_name().c_str(), a.dtype.c_str(), a.redop.c_str(), seg, a.iters,
              a.warmup_iters);
  std::printf("#%12s %12s %6s %6s %11s %9s %9s %7s%s\n", "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong",
              dev ? "       bound  %bound" : "");
  std::printf("#%12s %12s %6s %6s %11s %9s %9s %7s%s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "",
              dev ? "        (us)        " : "");
  if (mem.shared) std::printf("# host tensors in shared memory: the peers read AllGather chunks in place (memcpy)\n");
  std::fflush(stdout);
}

// One rank's whole benchmark; rank 0 prints. Returns the total #wrong over all sizes.
uint64_t bench_rank(Communicator& c, const BenchArgs& a, size_t min_b, size_t max_b, size_t seg,
                    const BenchMemory& mem_in = {}) {
  const int N = c.size(), r = c.rank();
  BenchMemory mem = mem_in;
  mem.shared = mem.dev == nullptr && a.host_memory == "auto" && c.reads_shared_memory();
  const DType dt = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  const ReduceOp redop = a.redop == "avg" ? ReduceOp::avg : ReduceOp::sum;
  const size_t esz = dtype_size(dt);
  const Collective& op = collective(a.op);
  const double bus_factor = op.bus_factor(N);
  const bool print = r == 0;
  // Small host values (times, #wrong, device ids) through the communicator, on device
  // buffers when the benchmark's are.
  Typed small_in(DType::f32, 1), small_out(DType::f32, N);
  Buffer<unsigned char> small_in_dev, small_out_dev;
  void* small_in_p = mem.place(small_in, 1, small_in_dev);
  void* small_out_p = mem.place(small_out, N, small_out_dev);
  auto gather_floats = [&](float mine) {
    small_in.set(0, mine);
    mem.upload(small_in_p, small_in, 1);
    mem.ready();
    c.all_gather(small_in_p, small_out_p, N, DType::f32);
    mem.download(small_out, small_out_p, N);
    std::vector<float> v(N);
    for (int q = 0; q < N; ++q) v[q] = small_out.get(q);
    return v;
  };
  // Ranks that share this rank's GPU (all ranks of comm-bench run on one host).
  int ranks_on_gpu = 1;
  if (mem.dev != nullptr) {
    std::vector<float> devs = gather_floats(float(mem.dev->device().index));
    ranks_on_gpu = int(std::count(devs.begin(), devs.end(), float(mem.dev->device().index)));
  }
  if (print && !a.json) print_table_header(c, a, mem, seg, ranks_on_gpu);
  uint64_t wrong_total = 0;
  for (size_t bytes = std::max<size_t>(min_b, esz); bytes <= max_b; bytes *= 2) {
    const size_t count = bytes / esz;
    const size_t nbytes = count * esz;
    ShardRange mine = shard_of(count, N, r);
    Typed full(dt, count), shard(dt, mine.count);
    Buffer<unsigned char> full_dev, shard_dev;
    void* full_p = mem.place(full, count, full_dev);
    void* shard_p = mem.place(shard, mine.count, shard_dev);
    auto run_once = [&] { op.run(c, full_p, shard_p, count, dt, redop); };
    for (size_t i = 0; i < count; ++i) full.set(i, input_value(r, i));
    mem.upload(full_p, full, count);
    mem.upload(shard_p, shard, mine.count);
    mem.ready();
    for (int k = 0; k < a.warmup_iters; ++k) run_once();
    c.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < a.iters; ++k) run_once();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                std::max(1, a.iters);
    // The checked run, on fresh inputs.
    for (size_t i = 0; i < count; ++i) full.set(i, op.reduces ? input_value(r, i) : -1.0f);
    for (size_t i = 0; i < mine.count; ++i) shard.set(i, float(int((mine.offset + i) % 241)));
    mem.upload(full_p, full, count);
    mem.upload(shard_p, shard, mine.count);
    mem.ready();
    c.reset_stats();
    run_once();
    uint64_t sent = c.stats().total().bytes_sent;
    mem.download(full, full_p, count);
    mem.download(shard, shard_p, mine.count);
    uint64_t wrong = 0;
    auto expect = [&](size_t i) {
      if (!op.reduces) return float(int(i % 241));
      float s = 0;
      for (int q = 0; q < N; ++q) s += input_value(q, i);
      float v = redop == ReduceOp::avg ? s / float(N) : s;
      return dt == DType::bf16 ? bf16_to_float(float_to_bf16(v)) : v;
    };
    if (op.answer_in_shard) {
      for (size_t i = 0; i < mine.count; ++i) wrong += shard.get(i) != expect(mine.offset + i);
    } else {
      for (size_t i = 0; i < count; ++i) wrong += full.get(i) != expect(i);
    }
    // Gather every rank's time and #wrong: the slowest rank's time, the sum of #wrong.
    std::vector<float> times = gather_floats(float(us));
    std::vector<float> wrongs = gather_floats(float(wrong));
    double t = 0;
    for (float x : times) t = std::max(t, double(x));
    uint64_t w = 0;
    for (float x : wrongs) w += static_cast<uint64_t>(x);
    // The fastest this GPU could do it: its ranks' bytes through its copy bandwidth.
    const double bound_us = mem.copy_gbps > 0 ? double(sent) * ranks_on_gpu / (mem.copy_gbps * 1e3) : 0;
    wrong_total += w;
    double algbw = t > 0 ? nbytes / (t * 1e-6) / 1e9 : 0;
    if (print) {
      if (a.json) {
        nlohmann::json j = {{"op", a.op},           {"transport", c.transport_name()}, {"nranks", N},
                            {"bytes", nbytes},       {"count", count},                 {"dtype", a.dtype},
                            {"time_us", t},          {"algbw_gbps", algbw},            {"busbw_gbps", algbw * bus_factor},
                            {"wrong", w},            {"bytes_sent_per_rank", sent}};
        if (mem.dev != nullptr) {
          j["device"] = device_name(mem.dev->device());
          j["copy_gbps"] = mem.copy_gbps;
          j["bound_us"] = bound_us;
        }
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf(" %12zu %12zu %6s %6s %11.2f %9.3f %9.3f %7llu", nbytes, count, a.dtype == "bf16" ? "bf16" : "float",
                    a.redop.c_str(), t, algbw, algbw * bus_factor, static_cast<unsigned long long>(w));
        if (mem.dev != nullptr) std::printf(" %11.2f %7.1f", bound_us, t > 0 ? 100.0 * bound_us / t : 0.0);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
    if (bytes > max_b / 2) break;  // no overflow past max_b
  }
  return wrong_total;
}

// --transport, read by comm's parse/name pair. Not train's row: comm-bench also runs ranks as
// threads of one process (thread), which train's transport refuses.
void add_transport_flag(CLI::App& app, CommTransport& transport) {
  app.add_option_function<std::string>(
         "--transport",
         [&transport](const std::string& s) {
           try {
             transport = parse_comm_transport(s);
           } catch (const Error& e) {  // "comm transport: expected ..." names the flag instead
             const std::string msg = e.what();
             RZ_FAIL("--transport:%s", msg.substr(msg.find(':') + 1).c_str());
           }
         },
         "auto (shm on one host), shm, tcp, or thread (ranks as threads)")
      ->type_name("string")
      ->default_str(comm_transport_name(transport))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// comm-bench's flags into a.
void add_comm_bench_flags(CLI::App& app, BenchArgs& a) {
  std::vector<std::string> ops;
  for (const Collective& k : kCollectives) ops.emplace_back(k.name);
  app.add_option("--op", a.op, "collective: " + collective_names())->check(CLI::IsMember(ops))->capture_default_str();
  add_setting_flag(app, a.settings, "nproc_per_node", {"--nproc"})->check(CLI::Range(1, 64));
  add_transport_flag(app, a.transport);
  add_setting_flags(app, a.settings, {"comm"});
  app.add_option("--device", a.device,
                 "where the buffers live: cpu, or cuda / cuda:K (GPU buffers: --comm nccl, or --comm ring over its cuda "
                 "transport, CUDA IPC between ranks on one host, several may share a GPU, staged over tcp with --transport tcp; segment 16M unless --segment-bytes; cuda "
                 "puts rank r on GPU LOCAL_RANK mod the GPU count; adds the copy bandwidth and bound columns; "
                 RZ_GPU_STATUS "); sim: the same on the simulated device, for tests)")
      ->capture_default_str();
  app.add_option("--min-bytes", a.min_bytes, "smallest size (K, M, G or KiB, MiB, GiB: binary; KB, MB, GB: decimal)")->capture_default_str();
  app.add_option("--max-bytes", a.max_bytes, "largest size (K, M, G or KiB, MiB, GiB: binary; KB, MB, GB: decimal)")->capture_default_str();
  app.add_option("--dtype", a.dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  app.add_option("--redop", a.redop, "reduction: sum or avg")->check(CLI::IsMember({"sum", "avg"}))->capture_default_str();
  add_number(app, "--iters", a.iters, "timed iterations per size")->check(CLI::Range(1, 1000000))->capture_default_str();
  // Not train's --warmup (LR warm-up steps): untimed collectives, nccl-tests' warmup_iters.
  // The old spelling stays: comm-bench has no learning rate to confuse it with.
  add_number(app, "--warmup-iters,--warmup", a.warmup_iters, "untimed iterations per size")
      ->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--segment-bytes", a.segment, "ring pipeline segment (K, M or KiB, MiB: binary; KB, MB: decimal)")->capture_default_str();
  add_setting_flags(app, a.settings, {"comm_timeout"});
  app.add_option("--host-memory", a.host_memory,
                 "host tensors: auto (in shared memory the peers read in place where the transport can, as "
                 "zero1/zero2's parameters are; shm with direct reads) or private (ordinary memory)")
      ->check(CLI::IsMember({"auto", "private"}))->capture_default_str();
  app.add_flag("--json", a.json, "one JSON object per size instead of the table");
  add_setting_flag(app, a.settings, "flight_entries", {})->check(CLI::Range(0, 1 << 24));
  add_setting_flags(app, a.settings, {"flight_dir", "comm_debug"});
  app.add_flag("--check-precision", a.check_precision,
               "instead of timing: the relative error of ring ReduceScatter and AllReduce in bf16 and fp32 against "
               "fp64, on real gradients of --config's model, for every --ranks N (thread ranks); --json for `ringzero "
               "plot precision`");
  app.add_option("--config", a.precision.config, "--check-precision: the training config whose model and data give "
                 "the gradients")->capture_default_str();
  app.add_option("--data", a.precision.data, "--check-precision: training shards instead of the config's");
  app.add_option("--init", a.precision.init, std::string("--check-precision: take the gradients at this model's weights: ") + kModelSourceHelp);
  app.add_option("--ranks", a.precision.nranks, "--check-precision: rank counts N (repeatable; default 2 4 8 16 32 64)")
      ->check(CLI::Range(2, 256));
}

// --transport thread: every rank a thread of this process, each benchmarking its own
// communicator; 0 when rank 0 found every result right.
int run_thread_ranks(const BenchArgs& a, const CommOptions& opts, size_t min_b, size_t max_b, size_t seg) {
  auto comms = make_thread_communicators(a.settings.nproc_per_node, opts);
  std::vector<uint64_t> wrong(a.settings.nproc_per_node);
  std::vector<std::string> errors(a.settings.nproc_per_node);
  std::vector<std::thread> ts;
  for (int r = 0; r < a.settings.nproc_per_node; ++r)
    ts.emplace_back([&, r] {
      try {
        wrong[r] = bench_rank(*comms[r], a, min_b, max_b, seg);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors) RZ_CHECK(e.empty(), "%s", e.c_str());
  return wrong[0] == 0 ? 0 : 1;
}

int run_comm_bench(int argc, char** argv) {
  BenchArgs a;
  CLI::App app{
      "Benchmark and check ringzero's ring collectives, nccl-tests style. Starts --nproc ranks\n"
      "(processes, or threads with --transport thread; with --comm mpi, mpirun -np N starts\n"
      "them and MPI's collectives are measured instead), times each size from --min-bytes to\n"
      "--max-bytes (doubling), then checks one run against its closed-form answer. Prints size,\n"
      "count, type, redop, time (slowest rank, us), algbw, busbw (GB/s) and #wrong; exits 1 if any\n"
      "result was wrong.",
      "ringzero comm-bench"};
  add_comm_bench_flags(app, a);
  if (!parse_command_line(app, argc, argv)) return 0;
  CommandPaths paths;  // train's rules for its one output (data/output_paths.h)
  paths.record_dirs = {{"--flight-dir", a.settings.flight_dir}};
  check_outputs(paths);
  if (a.check_precision) {
    a.precision.json = a.json;
    std::string about;
    const auto rows = check_reduction_precision(a.precision, stderr, &about);
    print_precision_rows(rows, about, a.json, stdout);
    return 0;
  }
  const size_t min_b = bench_bytes(a.min_bytes, "--min-bytes");
  const size_t max_b = bench_bytes(a.max_bytes, "--max-bytes");
  const size_t seg = bench_bytes(a.segment, "--segment-bytes");
  RZ_CHECK(min_b <= max_b, "--min-bytes %zu is larger than --max-bytes %zu", min_b, max_b);
  RZ_CHECK(seg >= 4, "--segment-bytes: expected at least 4, found %zu", seg);
  CommOptions opts;
  const CommBackend comm_backend = a.settings.comm;
  opts.backend = comm_backend;
  opts.transport = a.transport;
  opts.timeout_s = a.settings.comm_timeout;
  opts.segment_bytes = seg;
  opts.flight_entries = static_cast<size_t>(a.settings.flight_entries);
  opts.flight_dir = a.settings.flight_dir;
  opts.debug = a.settings.comm_debug;

  RZ_CHECK(comm_backend != CommBackend::mpi || a.transport != CommTransport::thread, "comm-bench: --comm mpi runs ranks as processes under mpirun, "
           "not as threads (drop --transport thread)");
  RZ_CHECK(comm_backend != CommBackend::nccl || a.transport != CommTransport::thread, "comm-bench: --comm nccl runs ranks as processes, one per "
           "GPU, not as threads (drop --transport thread)");
  // Flags the chosen backend never reads.
  RZ_CHECK(comm_backend != CommBackend::mpi || app.count("--nproc-per-node") == 0,
           "--nproc: does nothing with --comm mpi (mpirun -np N starts the ranks)");
  RZ_CHECK(comm_backend == CommBackend::ring || app.count("--segment-bytes") == 0,
           "--segment-bytes: does nothing with --comm %s (it cuts the ring's pipeline)", comm_backend_name(comm_backend));
  RZ_CHECK(comm_backend == CommBackend::ring || app.count("--transport") == 0,
           "--transport: does nothing with --comm %s (mpi and nccl bring their own)", comm_backend_name(comm_backend));
  const DeviceSpec spec = parse_device_spec(a.device);
  const Device device = spec.device();
  RZ_CHECK(device.is_cpu() || comm_backend != CommBackend::mpi,
           "comm-bench: --device %s with --comm mpi: GPU buffers need --comm ring or --comm nccl", a.device.c_str());
  if (!started_by_ringzero() && device.is_cpu() && comm_backend != CommBackend::mpi) {
    // Each rank holds the full tensor and its shard twice (a host copy and the buffer the
    // collective runs on) at --max-bytes: refuse what this machine cannot hold before any
    // rank is started (base/host_memory.h). The transports' slots come on top.
    const double N = a.settings.nproc_per_node, per_rank = 2.0 * (double(max_b) + std::ceil(double(max_b) / N));
    check_host_memory(per_rank * N,
                      strfmt("%s per rank (the tensor and its shard at --max-bytes, twice) x %d ranks = %s",
                             format_bytes(per_rank).c_str(), a.settings.nproc_per_node, format_bytes(per_rank * N).c_str()),
                      "comm-bench", "a smaller --max-bytes or --nproc");
  }
  RZ_CHECK(!device.is_cpu() || comm_backend != CommBackend::nccl, "comm-bench: --comm nccl works on GPU buffers: add --device cuda");
  const bool cuda_ring = comm_backend == CommBackend::ring && !device.is_cpu();
  // --device sim (tests): the GPU path on the simulated device, nccl and the cuda
  // transport over their simulated calls.
  const bool sim = device.kind == DeviceKind::sim;
  if (cuda_ring) {
    RZ_CHECK(a.transport != CommTransport::thread, "comm-bench: --device %s with --comm ring runs ranks as processes (CUDA IPC "
             "between them), not as threads (drop --transport thread)", a.device.c_str());
    const std::string why = sim ? std::string() : cuda_ring_unavailable();
    RZ_CHECK(why.empty(), "comm ring with GPU buffers: %s", why.c_str());
    if (app.count("--segment-bytes") == 0) opts.segment_bytes = kCudaDefaultSegmentBytes;
  }
  if (comm_backend == CommBackend::nccl) {
    const std::string why = sim ? std::string() : nccl_unavailable();
    RZ_CHECK(why.empty(), "comm nccl: %s", why.c_str());
  }
  if (comm_backend == CommBackend::mpi) {
    // mpirun started the ranks; --nproc is not used.
    RankEnv env = rank_env_from_environment();
    const RankPlacement at = place_rank(spec, env, comm_backend);
    auto comm = connect_rank(env, at, opts);
    uint64_t wrong = bench_rank(*comm, a, min_b, max_b, seg);
    if (wrong != 0 && env.rank == 0) std::fprintf(stderr, "comm-bench: %llu wrong elements\n", (unsigned long long)wrong);
    return wrong == 0 ? 0 : 1;
  }
  if (a.transport == CommTransport::thread) return run_thread_ranks(a, opts, min_b, max_b, seg);
  RankLaunch job;
  job.nproc_per_node = a.settings.nproc_per_node;
  if (should_launch(job)) return launch_ranks(job, std::vector<std::string>(argv, argv + argc));
  RankEnv env = rank_env_from_environment();
  RZ_CHECK(env.world_size == a.settings.nproc_per_node || !started_by_ringzero(),
           "comm-bench: WORLD_SIZE %d differs from --nproc %d", env.world_size, a.settings.nproc_per_node);
  BenchMemory mem;
  const RankPlacement at = place_rank(spec, env, comm_backend);
  if (!at.device.is_cpu()) {
    mem.dev = at.backend.get();
    mem.copy_gbps = measure_copy_gbps(*at.backend, std::clamp<size_t>(max_b, 32u << 20, 1u << 30));
  }
  auto comm = connect_rank(env, at, opts);
  uint64_t wrong = bench_rank(*comm, a, min_b, max_b, opts.segment_bytes, mem);
  if (wrong != 0 && env.rank == 0) std::fprintf(stderr, "comm-bench: %llu wrong elements\n", (unsigned long long)wrong);
  return wrong == 0 ? 0 : 1;
}

const RegisterCommand kRegister{Command{"comm-bench", "benchmark and check the ring collectives (nccl-tests columns)",
                                        run_comm_bench, 60}};

}  // namespace
}  // namespace rz
