// The ring's cuda transport on a GPU: 2 and 4 rank processes sharing GPU 0 (CUDA IPC
// between them), and 2 over its across-hosts form (pinned host staging over tcp). Every collective, blocking and async, fp32 and bf16, sum and avg, on
// counts that N does not divide and on counts of many segments, against closed forms;
// all_reduce == reduce_scatter + all_gather bitwise; host buffers over the host channel, a mix refused;
// comm-bench --device cuda --comm ring checked by its #wrong column; and a rank killed
// mid-benchmark makes the other fail within its --comm-timeout.
// Without the CUDA backend or a GPU it exits 77 (CTest: skipped). The parent never touches
// CUDA (it forks the ranks; a child asks whether a GPU is there). Never run on a GPU yet.
#include <catch2/catch.hpp>

#include "tests/catch_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "base/memory.h"
#include "comm/transport/device_ring.h"
#include "kernels/backend.h"
#include "kernels/registry/device_registry.h"
#include "run_ringzero.h"
#include "gpu_procs.h"
#include "test_comm_procs.h"

using namespace rz;
using rz::testing::expected_reduce;
using rz::testing::gather_value;
using rz::testing::Tensor;
using rz::testing::value_of;

namespace {

// Inside a rank process: GPU 0 through the CUDA backend.
Backend& gpu() {
  static std::unique_ptr<Backend> b = make_backend(Device{DeviceKind::cuda, 0});
  return *b;
}

struct DevTensor {
  Tensor host;
  Buffer<unsigned char> dev;
  DevTensor(DType dt, size_t n) : host(dt, n), dev(MemTag::comm, n * dtype_size(dt) + 4, gpu().device()) {}
  void* ptr() { return dev.data(); }
  char* at(size_t elem) { return reinterpret_cast<char*>(dev.data()) + elem * dtype_size(host.dt); }
  void up(size_t n) {
    gpu().copy_from_host(dev.data(), host.data(), n * dtype_size(host.dt));
    gpu().synchronize();
  }
  void down(size_t n) {
    gpu().copy_to_host(host.data(), dev.data(), n * dtype_size(host.dt));
    gpu().synchronize();
  }
};

#define GPU_REQUIRE(cond, ...) \
  do {                         \
    if (!(cond)) RZ_FAIL(__VA_ARGS__); \
  } while (0)

// One rank: every collective on device buffers against its closed form.
void check_rank(Communicator& c, const std::string& transport) {
  const int N = c.size(), r = c.rank();
  GPU_REQUIRE(c.transport_name() == transport, "transport is %s, expected %s", c.transport_name().c_str(),
              transport.c_str());
  for (DType dt : {DType::f32, DType::bf16})
    for (size_t count : {size_t(0), size_t(1), size_t(N) + 1, size_t(7), size_t(1000003)}) {
      const ShardRange mine = shard_of(count, N, r);
      const size_t esz = dtype_size(dt);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        DevTensor t(dt, count), g(dt, count), s(dt, mine.count);
        for (size_t i = 0; i < count; ++i) t.host.set(i, value_of(r, i));
        t.up(count);
        g.host = t.host;
        g.up(count);
        c.all_reduce(t.ptr(), count, dt, op);
        t.down(count);
        for (size_t i = 0; i < count; ++i)
          GPU_REQUIRE(t.host.get(i) == expected_reduce(N, i, op, dt), "all_reduce %s %s count %zu: element %zu is %g",
                      dtype_name(dt), reduce_op_name(op), count, i, double(t.host.get(i)));
        c.reduce_scatter(g.ptr(), s.ptr(), count, dt, op);
        s.down(mine.count);
        for (size_t i = 0; i < mine.count; ++i)
          GPU_REQUIRE(s.host.get(i) == expected_reduce(N, mine.offset + i, op, dt),
                      "reduce_scatter %s count %zu: element %zu", dtype_name(dt), count, mine.offset + i);
        c.all_gather(s.ptr(), g.ptr(), count, dt);
        g.down(count);
        GPU_REQUIRE(std::memcmp(g.host.data(), t.host.data(), count * esz) == 0,
                    "all_reduce != reduce_scatter + all_gather (%s %s, count %zu)", dtype_name(dt),
                    reduce_op_name(op), count);
      }
      DevTensor s(dt, mine.count), g(dt, count), b(dt, count);
      for (size_t i = 0; i < mine.count; ++i) s.host.set(i, gather_value(mine.offset + i));
      s.up(mine.count);
      c.all_gather(s.ptr(), g.ptr(), count, dt);
      g.down(count);
      for (size_t i = 0; i < count; ++i)
        GPU_REQUIRE(g.host.get(i) == gather_value(i), "all_gather %s count %zu: element %zu", dtype_name(dt), count, i);
      for (size_t i = 0; i < count; ++i) b.host.set(i, r == N - 1 ? gather_value(i) : -1.0f);
      b.up(count);
      c.broadcast(b.ptr(), count, dt, N - 1);
      c.barrier();
      b.down(count);
      for (size_t i = 0; i < count; ++i)
        GPU_REQUIRE(b.host.get(i) == gather_value(i), "broadcast %s count %zu: element %zu", dtype_name(dt), count, i);
      // async and in place: reduce_scatter, then all_gather of its shard, OnDone in order
      DevTensor a(dt, count);
      for (size_t i = 0; i < count; ++i) a.host.set(i, value_of(r, i));
      a.up(count);
      std::vector<int> order;
      auto h1 = c.reduce_scatter_async(a.ptr(), a.at(mine.offset), count, dt, ReduceOp::sum, [&] { order.push_back(1); });
      auto h2 = c.all_gather_async(a.at(mine.offset), a.ptr(), count, dt, [&] { order.push_back(2); });
      h2->wait();
      h1->wait();
      GPU_REQUIRE((order == std::vector<int>{1, 2}), "OnDone out of issue order");
      a.down(count);
      for (size_t i = 0; i < count; ++i)
        GPU_REQUIRE(a.host.get(i) == expected_reduce(N, i, ReduceOp::sum, dt), "async %s count %zu: element %zu",
                    dtype_name(dt), count, i);
    }
  // Host buffers go over the host channel; a host and a GPU buffer in one call are one line.
  std::vector<float> host(7);
  for (size_t i = 0; i < host.size(); ++i) host[i] = value_of(r, i);
  c.all_reduce(host.data(), host.size(), DType::f32, ReduceOp::sum);
  for (size_t i = 0; i < host.size(); ++i)
    GPU_REQUIRE(host[i] == expected_reduce(N, i, ReduceOp::sum, DType::f32), "host all_reduce: element %zu", i);
  DevTensor d(DType::f32, size_t(N) * 7);
  bool refused = false;
  try {
    c.all_gather(host.data(), d.ptr(), size_t(N) * 7, DType::f32);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("host and GPU buffers in one collective") != std::string::npos;
  }
  GPU_REQUIRE(refused, "a host shard with a GPU output was not refused");
}

}  // namespace

TEST_CASE("cuda transport: 2 and 4 ranks on GPU 0, every collective against closed forms, odd counts") {
  // auto: device to device through CUDA IPC; tcp: the across-hosts form (pinned staging), here on one host.
  for (auto [N, transport, name] : {std::tuple<int, const char*, const char*>{2, "auto", "cuda"}, {4, "auto", "cuda"},
                                    {2, "tcp", "cuda-tcp"}}) {
    CommOptions o;
    o.device = Device{DeviceKind::cuda, 0};
    o.transport = parse_comm_transport(transport);
    o.segment_bytes = 64 << 10;  // 1000003 fp32 elements: 62 segments, each device slot reused
    o.timeout_s = 60;
    const std::string expect = name;
    auto results = rz::testing::run_process_ranks(N, o, [&](Communicator& c) { check_rank(c, expect); }, 240);
    for (int r = 0; r < N; ++r) {
      INFO(N << " ranks, transport " << transport << ", rank " << r << ": " << results[r].error);
      CHECK(results[r].status == 0);
    }
  }
}

TEST_CASE("cuda transport: comm-bench --device cuda --comm ring checks every size") {
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    const std::string args = std::string("comm-bench --device cuda:0 --comm ring --nproc 2 --op ") + op +
                             " --dtype bf16 --redop avg --min-bytes 28 --max-bytes 4M --segment-bytes 256K "
                             "--iters 2 --warmup 1 --comm-timeout 60";
    const auto r = rz::test::run_ringzero(args, 120);
    INFO(args << "\n" << r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("transport cuda") != std::string::npos);
  }
}

TEST_CASE("cuda transport: a rank killed mid-benchmark makes the other fail within its timeout", "[slow]") {
  const rz::test::KilledRun run = rz::test::run_with_killed_rank(
      "comm-bench --device cuda:0 --comm ring --nproc 2 --min-bytes 64M --max-bytes 64M --iters 100000 "
      "--warmup 0 --comm-timeout 10",
      pick_free_port());
  INFO(run.out);
  CHECK(run.out.find("rank0-exit=0") == std::string::npos);
  CHECK(run.out.find("rank0-exit=") != std::string::npos);
  CHECK(run.out.find("rank 0") != std::string::npos);
  CHECK(run.seconds < 8 + 10 + 20);
}

int main(int argc, char** argv) {
  // Ask in a child, so this process (which forks the ranks) never initialises CUDA.
  const std::string why = rz::test::probe_in_child(cuda_ring_unavailable);
  if (!why.empty()) {
    std::printf("test_comm_cuda_ring_gpu: SKIPPED: %s\n", why.c_str());
    return 77;
  }
  return rz::test::run_catch_session(argc, argv);
}
