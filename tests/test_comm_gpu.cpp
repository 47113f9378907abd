// `--comm nccl` on a GPU: every collective against closed-form answers, blocking and
// async (OnDone in issue order), fp32 and bf16, sum and avg, counts that N does not divide,
// with 1 rank in this process and with as many ranks as there are GPUs (up to 4, NCCL
// wants one GPU per rank) through `ringzero comm-bench --device cuda --comm nccl`, whose
// #wrong column checks every result; and a rank killed mid-benchmark makes the other fail
// within its --comm-timeout. Without NCCL in the build or without a GPU it exits 77, which
// CTest reports as skipped. Never run on a GPU yet (docs/gpu-comm.md).
#include <catch2/catch.hpp>

#include "tests/catch_runner.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/memory.h"
#include "comm/factory.h"
#include "comm/nccl/nccl_communicator.h"
#include "kernels/backend.h"
#include "kernels/device_provider.h"
#include "kernels/registry/device_registry.h"
#include "gpu_procs.h"
#include "run_ringzero.h"
#include "test_comm_util.h"

using namespace rz;
using rz::testing::expected_reduce;
using rz::testing::gather_value;
using rz::testing::Tensor;
using rz::testing::value_of;

namespace {

int gpu_count() { return cuda_provider().device_count(); }

Backend& gpu() {
  static std::unique_ptr<Backend> b = make_backend(Device{DeviceKind::cuda, 0});
  return *b;
}

struct DevTensor {
  Tensor host;
  Buffer<unsigned char> dev;
  DevTensor(DType dt, size_t n) : host(dt, n), dev(MemTag::comm, n * dtype_size(dt) + 4, gpu().device()) {}
  void* ptr() { return dev.data(); }
  void up(size_t n) { gpu().copy_from_host(dev.data(), host.data(), n * dtype_size(host.dt)); gpu().synchronize(); }
  void down(size_t n) { gpu().copy_to_host(host.data(), dev.data(), n * dtype_size(host.dt)); }
};

// A one-rank NCCL communicator on GPU 0.
std::unique_ptr<Communicator> one_nccl_rank() {
  CommOptions o;
  o.backend = CommBackend::nccl;
  o.device = Device{DeviceKind::cuda, 0};
  o.timeout_s = 60;
  return connect_communicator(RankEnv{}, o);
}

}  // namespace

TEST_CASE("nccl, one rank: every collective, blocking and async, against closed forms") {
  auto c = one_nccl_rank();
  REQUIRE(c->size() == 1);
  for (DType dt : {DType::f32, DType::bf16})
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000003)}) {
      INFO(dtype_name(dt) << " count " << count);
      DevTensor t(dt, count), s(dt, count);
      for (size_t i = 0; i < count; ++i) t.host.set(i, value_of(0, i));
      t.up(count);
      c->all_reduce(t.ptr(), count, dt, ReduceOp::avg);
      t.down(count);
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) bad += t.host.get(i) != expected_reduce(1, i, ReduceOp::avg, dt);
      CHECK(bad == 0);
      // async reduce_scatter then all_gather, OnDone in issue order
      std::vector<int> order;
      auto h1 = c->reduce_scatter_async(t.ptr(), s.ptr(), count, dt, ReduceOp::sum, [&] { order.push_back(1); });
      auto h2 = c->all_gather_async(s.ptr(), t.ptr(), count, dt, [&] { order.push_back(2); });
      h2->wait();
      h1->wait();
      CHECK(order == std::vector<int>{1, 2});
      t.down(count);
      bad = 0;
      for (size_t i = 0; i < count; ++i) bad += t.host.get(i) != expected_reduce(1, i, ReduceOp::sum, dt);
      CHECK(bad == 0);
      for (size_t i = 0; i < count; ++i) t.host.set(i, gather_value(i));
      t.up(count);
      c->broadcast(t.ptr(), count, dt, 0);
      c->barrier();
      t.down(count);
      bad = 0;
      for (size_t i = 0; i < count; ++i) bad += t.host.get(i) != gather_value(i);
      CHECK(bad == 0);
    }
  Tensor host(DType::f32, 4);
  REQUIRE_THROWS_WITH(c->all_reduce(host.data(), 4, DType::f32, ReduceOp::sum), Catch::Contains("not device memory"));
}

TEST_CASE("nccl: a stream-form OnDone runs at issue on the comm stream, ordered after the collective") {
  auto c = one_nccl_rank();
  const size_t count = 1 << 22;  // long enough that the collective is still queued at issue
  DevTensor t(DType::f32, count), acc(DType::f32, count);
  for (size_t i = 0; i < count; ++i) t.host.set(i, value_of(0, i));
  t.up(count);
  void* seen = nullptr;
  bool ran = false;
  auto h = c->all_reduce_async(t.ptr(), count, DType::f32, ReduceOp::avg, OnDone::on_stream([&](void* stream) {
    seen = stream;
    ran = true;
    // The shard accumulation zero2 does: queued on the comm stream, behind the all_reduce.
    Backend::StreamScope on(gpu(), stream);
    gpu().accumulate_f32(static_cast<float*>(acc.ptr()), static_cast<const float*>(t.ptr()), count, true);
  }));
  CHECK(ran);  // at issue, before anyone waited
  CHECK(seen != nullptr);
  h->wait();  // the handle's event covers the accumulate too
  acc.down(count);
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad += acc.host.get(i) != expected_reduce(1, i, ReduceOp::avg, DType::f32);
  CHECK(bad == 0);
  // A mark on the comm stream, waited for on the compute stream: a later compute-stream op
  // sees the accumulated values (zero2's staging release).
  auto h2 = c->all_reduce_async(t.ptr(), count, DType::f32, ReduceOp::sum, OnDone::on_stream([&](void* stream) {
    Backend::StreamScope on(gpu(), stream);
    gpu().accumulate_f32(static_cast<float*>(acc.ptr()), static_cast<const float*>(t.ptr()), count, false);
    std::shared_ptr<void> m = gpu().mark(stream);
    gpu().wait_for(m);
  }));
  gpu().copy_to_host(acc.host.data(), acc.ptr(), count * sizeof(float));  // compute stream, no wait on h2
  bad = 0;
  for (size_t i = 0; i < count; ++i) bad += acc.host.get(i) != 2.0f * expected_reduce(1, i, ReduceOp::avg, DType::f32);
  CHECK(bad == 0);
  h2->wait();
}

TEST_CASE("nccl, one rank per GPU (up to 4): comm-bench checks every collective, odd counts included", "[slow]") {
  const int most = std::min(gpu_count(), 4);
  std::vector<int> rank_counts{1};
  if (most > 1) rank_counts.push_back(most);
  for (int n : rank_counts)
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"})
      for (auto [dt, redop] : {std::pair<const char*, const char*>{"fp32", "sum"}, {"bf16", "avg"}}) {
          // 28 bytes: 7 fp32 / 14 bf16 elements, doubling to 448 K: counts N does not divide
          const std::string args = std::string("comm-bench --device cuda --comm nccl --nproc ") + std::to_string(n) +
                                   " --op " + op + " --dtype " + dt + " --redop " + redop +
                                   " --min-bytes 28 --max-bytes 512K --iters 2 --warmup 1 --comm-timeout 60";
          const auto r = rz::test::run_ringzero(args, 120);
          INFO(args << "\n" << r.output);
          CHECK(r.status == 0);
        }
}

TEST_CASE("nccl: a rank killed mid-benchmark makes the other fail within its timeout", "[slow]") {
  if (gpu_count() < 2) {
    WARN("one GPU: NCCL needs a GPU per rank, so the killed-rank case needs two");
    return;
  }
  const rz::test::KilledRun run = rz::test::run_with_killed_rank(
      "comm-bench --device cuda --comm nccl --nproc 2 --min-bytes 64M --max-bytes 64M --iters 100000 "
      "--warmup 0 --comm-timeout 10",
      29731);
  INFO(run.out);
  CHECK(run.out.find("rank0-exit=0") == std::string::npos);
  CHECK(run.out.find("rank0-exit=") != std::string::npos);
  CHECK(run.out.find("rank 0") != std::string::npos);
  CHECK(run.seconds < 8 + 10 + 20);
}

int main(int argc, char** argv) {
  const std::string why = nccl_unavailable();
  if (!why.empty()) {
    std::printf("test_comm_gpu: SKIPPED: %s\n", why.c_str());
    return 77;
  }
  return rz::test::run_catch_session(argc, argv);
}
