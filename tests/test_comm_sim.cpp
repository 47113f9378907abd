// GPU ranks' two communicators on the simulated device (base/sim_device.h), so their
// code runs in CI: the ring's cuda transport (comm/transport/device_ring.cpp over the simulated link,
// comm/transport/sim_ring.cpp) and the nccl backend's own logic (comm/nccl/nccl_communicator.cpp).
//
// cuda transport: 1 to 4 thread ranks, inboxes in simulated-device memory, device to
// device and staged through host memory (the across-hosts form): every collective on
// device buffers against closed forms, bitwise the plain ring's, with its byte counts;
// host buffers go over the host channel; a mix is refused; ring.cpp reaches device
// elements only through the link (a host access would die in the arena).
//
// nccl: NcclCommunicator over the simulated call table (comm/nccl/nccl_calls_sim.cpp), 1 to 4
// thread ranks, the unique id through a real store. NCCL's contract holds: buffers must be
// device memory (a host pointer is refused with one line), work is stream-ordered (a
// stream-form OnDone runs when the collective is queued, on the comm stream, and sees its
// result; the handle is done only after both), uneven counts go through the padded
// scratch, avg divides on the owner. Results against closed forms, fp32 bitwise equal to
// the plain ring's; a rank that never joins a collective fails the others within the
// timeout, naming the rank and the collective.
// In processes (`train --device sim --comm nccl`): test_train_sim.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>

#include <unistd.h>

#include "base/memory.h"
#include "base/sim_device.h"
#include "base/trace.h"
#include "comm/factory.h"
#include "comm/nccl/nccl_calls.h"
#include "comm/transport/device_ring.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/ring_communicator.h"
#include "comm/rendezvous/store.h"
#include "comm/transport/transports.h"
#include "test_comm_util.h"

using namespace rz;
using rz::testing::expected_reduce;
using rz::testing::gather_value;
using rz::testing::run_ranks;
using rz::testing::value_of;

namespace {

// A tensor in simulated-device memory, filled and read through the arena's view.
struct DevTensor {
  DType dt;
  size_t n;
  Buffer<unsigned char> buf;
  DevTensor(DType d, size_t count) : dt(d), n(count), buf(MemTag::comm, count * dtype_size(d) + 1, Device{DeviceKind::sim, 0}) {}
  void* data() { return buf.data(); }
  unsigned char* host(size_t bytes) { return static_cast<unsigned char*>(sim::host_view(buf.data(), bytes, "test", "t")); }
  void set(size_t i, float v) {
    unsigned char* h = host(buf.size());
    if (dt == DType::f32) std::memcpy(h + i * 4, &v, 4);
    else {
      bf16 b = float_to_bf16(v);
      std::memcpy(h + i * 2, &b, 2);
    }
  }
  float get(size_t i) {
    const unsigned char* h = host(buf.size());
    if (dt == DType::f32) {
      float v;
      std::memcpy(&v, h + i * 4, 4);
      return v;
    }
    bf16 b;
    std::memcpy(&b, h + i * 2, 2);
    return bf16_to_float(b);
  }
};

struct SimNcclRanks {
  std::unique_ptr<StoreServer> server;
  std::vector<std::unique_ptr<Communicator>> comms;
};

// N NCCL ranks on the simulated device, each over a thread-transport host ring.
SimNcclRanks make_ranks(int N, double timeout_s = 30.0) {
  SimNcclRanks R;
  R.server = std::make_unique<StoreServer>(0, "sim-nccl-token");
  CommOptions opts;
  opts.timeout_s = timeout_s;
  opts.segment_bytes = 1024;  // several segments per collective
  CommOptions ring_opts = opts;  // as comm/factory.cpp's sim_nccl_ring_options: NCCL's machinery
  ring_opts.flight_entries = 0;
  ring_opts.trace_spans = false;
  auto rings = make_thread_communicators(N, ring_opts);
  R.comms.resize(N);
  auto errors = run_ranks(N, [&](int r) {
    RankEnv env;
    env.rank = r;
    env.world_size = N;
    env.local_rank = r;
    CommOptions o = opts;
    o.backend = CommBackend::nccl;
    o.device = Device{DeviceKind::sim, r % sim::kDeviceCount};  // as place_rank spreads a host's ranks
    StoreClient store("127.0.0.1", R.server->port(), "sim-nccl-token", 10.0);
    R.comms[r] = make_nccl_communicator(env, o, &store, nullptr, make_sim_nccl_calls(std::move(rings[r])));
  });
  for (auto& e : errors) REQUIRE(e.empty());
  return R;
}

// Every collective on one rank, blocking and async, against closed forms. Byte counters:
// the ring's own (ring_bytes) or NCCL's bandwidth-optimal figure.
void check_rank(Communicator& c, DType dt, const std::vector<size_t>& counts, bool ring_bytes = false) {
  const int N = c.size(), r = c.rank();
  const size_t esz = dtype_size(dt);
  for (size_t count : counts) {
    const ShardRange mine = shard_of(count, N, r);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      DevTensor buf(dt, count), in(dt, count), out(dt, mine.count), inplace(dt, count);
      for (size_t i = 0; i < count; ++i) {
        buf.set(i, value_of(r, i));
        in.set(i, value_of(r, i));
        inplace.set(i, value_of(r, i));
      }
      c.reset_stats();
      c.all_reduce(buf.data(), count, dt, op);
      for (size_t i = 0; i < count; ++i) RANK_REQUIRE(buf.get(i) == expected_reduce(N, i, op, dt));
      c.reduce_scatter_async(in.data(), out.data(), count, dt, op)->wait();
      for (size_t i = 0; i < mine.count; ++i) RANK_REQUIRE(out.get(i) == expected_reduce(N, mine.offset + i, op, dt));
      // In place: out is in's own shard (zero2's staging buckets).
      c.reduce_scatter(inplace.data(), static_cast<unsigned char*>(inplace.data()) + mine.offset * esz, count, dt, op);
      for (size_t i = 0; i < mine.count; ++i)
        RANK_REQUIRE(inplace.get(mine.offset + i) == expected_reduce(N, mine.offset + i, op, dt));
      for (size_t i = 0; i < count; ++i) RANK_REQUIRE(in.get(i) == value_of(r, i));  // the input is untouched
      const CommStats& st = c.stats();
      if (ring_bytes) {
        RANK_REQUIRE(st.by_kind[int(CollectiveKind::all_reduce)].bytes_sent ==
                     rz::testing::ar_bytes_sent(count, N, r, dt, 256, /*host_buffers=*/false));
        RANK_REQUIRE(st.by_kind[int(CollectiveKind::reduce_scatter)].bytes_sent ==
                     2 * rz::testing::rs_bytes_sent(count, N, r, dt));
      } else {  // NCCL's bytes: what a bandwidth-optimal algorithm moves per rank
        const uint64_t phase = (count - mine.count) * esz;
        RANK_REQUIRE(st.by_kind[int(CollectiveKind::all_reduce)].bytes_sent == 2 * phase);
        RANK_REQUIRE(st.by_kind[int(CollectiveKind::reduce_scatter)].bytes_sent == 2 * phase);
      }
    }
    DevTensor shard(dt, mine.count), gathered(dt, count), inplace(dt, count);
    for (size_t i = 0; i < mine.count; ++i) {
      shard.set(i, gather_value(mine.offset + i));
      inplace.set(mine.offset + i, gather_value(mine.offset + i));
    }
    c.all_gather(shard.data(), gathered.data(), count, dt);
    c.all_gather_async(static_cast<unsigned char*>(inplace.data()) + mine.offset * esz, inplace.data(), count, dt)->wait();
    for (size_t i = 0; i < count; ++i) RANK_REQUIRE(gathered.get(i) == gather_value(i) && inplace.get(i) == gather_value(i));
    for (int root = 0; root < N; ++root) {
      DevTensor b(dt, count);
      for (size_t i = 0; i < count; ++i) b.set(i, r == root ? gather_value(i) + root : -1.0f);
      c.broadcast(b.data(), count, dt, root);
      for (size_t i = 0; i < count; ++i) RANK_REQUIRE(b.get(i) == gather_value(i) + root);
    }
    c.barrier();
  }
}

struct SimRingRanks {
  std::unique_ptr<StoreServer> server;
  std::vector<std::unique_ptr<Communicator>> comms;
};

// N thread ranks over the cuda transport with simulated links (device_ring.h), connected
// through a real store; staging: the across-hosts form over a host channel.
SimRingRanks make_sim_ring_ranks(int N, size_t segment_bytes, bool staging) {
  SimRingRanks R;
  R.server = std::make_unique<StoreServer>(0, "sim-ring-token");
  CommOptions opts;
  opts.segment_bytes = segment_bytes;
  opts.timeout_s = 30.0;
  opts.device = Device{DeviceKind::sim, 0};  // each rank's ordinal below, as place_rank spreads a host's ranks
  auto controls = std::make_shared<std::vector<std::unique_ptr<HeapSlotRing>>>();
  auto hosts = std::make_shared<std::vector<std::unique_ptr<HeapSlotRing>>>();
  for (int r = 0; r < N; ++r) {
    controls->push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, 64));
    hosts->push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, slot_bytes_for(opts)));
  }
  R.comms.resize(N);
  auto errors = run_ranks(N, [&](int r) {
    RankEnv env;
    env.rank = r;
    env.world_size = N;
    env.local_rank = r;
    CommOptions placed = opts;
    placed.device.index = r % sim::kDeviceCount;
    if (staging) {
      auto link = make_sim_link(env, placed, 0);
      auto host = make_slot_channel((*hosts)[(r + 1) % N]->ring(), (*hosts)[r]->ring(), r, N, opts.timeout_s, false,
                                    hosts);
      auto c = std::make_unique<RingCommunicator>(r, N, "cuda-tcp", make_staging_ring_channel(std::move(host), link), opts);
      c->set_device(link);
      R.comms[r] = std::move(c);
      return;
    }
    const uint32_t nslots = cuda_inbox_slots();
    auto link = make_sim_link(env, placed, nslots * segment_bytes);
    StoreClient store("127.0.0.1", R.server->port(), "sim-ring-token", 10.0);
    InboxRecord mine;
    mine.pid = static_cast<int>(getpid());
    mine.device = link->device();
    mine.nslots = nslots;
    mine.slot_bytes = segment_bytes;
    mine.handle = link->inbox_handle();
    const InboxRecord right = exchange_inbox_records(store, r, N, mine, link->handle_bytes());
    auto control = make_slot_channel((*controls)[(r + 1) % N]->ring(), (*controls)[r]->ring(), r, N, opts.timeout_s,
                                     false, controls);
    auto ch = make_device_ring_channel(std::move(control), kSlotsPerEdge, link, link->open_inbox(right), nslots,
                                       segment_bytes, r, N);
    auto c = std::make_unique<RingCommunicator>(r, N, "cuda", std::move(ch), opts);
    c->set_device(link);
    R.comms[r] = std::move(c);
  });
  for (auto& e : errors) REQUIRE(e.empty());
  return R;
}

}  // namespace

TEST_CASE("the cuda transport on the simulated device: every collective on device buffers", "[comm][sim]") {
  for (bool staging : {false, true})
    for (int N = 1; N <= 4; ++N) {
      CAPTURE(staging, N);
      SimRingRanks R = make_sim_ring_ranks(N, 256, staging);
      for (DType dt : {DType::f32, DType::bf16}) {
        CAPTURE(dtype_name(dt));
        const std::vector<size_t> counts = {0, 1, size_t(N - 1), size_t(N + 1), 7, 10007};
        auto errors = run_ranks(N, [&](int r) { check_rank(*R.comms[r], dt, counts, /*ring_bytes=*/true); });
        for (auto& e : errors) CHECK(e == "");
      }
    }
}

TEST_CASE("the cuda transport on the simulated device: bitwise the plain ring; host buffers on the host channel",
          "[comm][sim]") {
  const int N = 3;
  const size_t count = 10007;
  SimRingRanks R = make_sim_ring_ranks(N, 1024, false);
  CommOptions opts;
  opts.segment_bytes = 1024;
  auto rings = make_thread_communicators(N, opts);
  std::mt19937 gen(9);
  std::vector<std::vector<float>> inputs(N, std::vector<float>(count));
  for (auto& v : inputs)
    for (float& x : v) x = std::uniform_real_distribution<float>(-1, 1)(gen);
  auto errors = run_ranks(N, [&](int r) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      std::vector<float> want = inputs[r];
      rings[r]->all_reduce(want.data(), count, DType::f32, op);
      DevTensor got(DType::f32, count);
      std::memcpy(got.host(count * 4), inputs[r].data(), count * 4);
      R.comms[r]->all_reduce(got.data(), count, DType::f32, op);
      RANK_REQUIRE(std::memcmp(got.host(count * 4), want.data(), count * 4) == 0);
      // The trainer's scalars: host memory, over the control channel.
      std::vector<float> host = inputs[r];
      R.comms[r]->all_reduce(host.data(), count, DType::f32, op);
      RANK_REQUIRE(std::memcmp(host.data(), want.data(), count * 4) == 0);
    }
    std::vector<float> host(4);
    DevTensor dev(DType::f32, 4 * N);
    bool refused = false;
    try {
      R.comms[r]->all_gather(host.data(), dev.data(), 4 * N, DType::f32);
    } catch (const Error& e) {
      refused = std::string(e.what()).find("host and GPU buffers in one collective") != std::string::npos;
    }
    RANK_REQUIRE(refused);
  });
  for (auto& e : errors) CHECK(e == "");
}

TEST_CASE("nccl on the simulated device: every collective, 1 to 4 ranks, counts N does not divide", "[comm][sim]") {
  for (int N = 1; N <= 4; ++N) {
    CAPTURE(N);
    SimNcclRanks R = make_ranks(N);
    REQUIRE(R.comms[0]->transport_name() == "nccl");
    for (DType dt : {DType::f32, DType::bf16}) {
      CAPTURE(dtype_name(dt));
      const std::vector<size_t> counts = {0, 1, size_t(N - 1), size_t(N + 1), 7, 100003};
      auto errors = run_ranks(N, [&](int r) { check_rank(*R.comms[r], dt, counts); });
      for (auto& e : errors) CHECK(e == "");
    }
  }
}

TEST_CASE("nccl on the simulated device: fp32 results are bitwise the ring's", "[comm][sim]") {
  const int N = 3;
  const size_t count = 10007;
  SimNcclRanks R = make_ranks(N);
  CommOptions opts;
  opts.segment_bytes = 64;
  auto rings = make_thread_communicators(N, opts);
  std::mt19937 gen(5);
  std::vector<std::vector<float>> inputs(N, std::vector<float>(count));
  for (auto& v : inputs)
    for (float& x : v) x = std::uniform_real_distribution<float>(-1, 1)(gen);
  auto errors = run_ranks(N, [&](int r) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      std::vector<float> want = inputs[r];
      rings[r]->all_reduce(want.data(), count, DType::f32, op);
      DevTensor got(DType::f32, count);
      std::memcpy(got.host(count * 4), inputs[r].data(), count * 4);
      R.comms[r]->all_reduce(got.data(), count, DType::f32, op);
      RANK_REQUIRE(std::memcmp(got.host(count * 4), want.data(), count * 4) == 0);
    }
  });
  for (auto& e : errors) CHECK(e == "");
}

TEST_CASE("nccl on the simulated device refuses host memory, as NCCL does", "[comm][sim]") {
  SimNcclRanks R = make_ranks(1);
  std::vector<float> host(8, 1.0f);
  try {
    R.comms[0]->all_reduce(host.data(), host.size(), DType::f32, ReduceOp::sum);
    FAIL("a host buffer was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "comm nccl: rank 0: all_reduce: buf is not device memory (the nccl backend works "
                                   "on GPU buffers: --device cuda)");
  }
  DevTensor dev(DType::f32, 8);
  CHECK_THROWS_WITH(R.comms[0]->all_gather(host.data(), dev.data(), 8, DType::f32),
                    Catch::Contains("all_gather: shard is not device memory"));
  R.comms[0]->all_reduce(dev.data(), 8, DType::f32, ReduceOp::sum);  // still usable
}

TEST_CASE("nccl on the simulated device: a stream-form OnDone runs on the comm stream behind its collective",
          "[comm][sim]") {
  const int N = 2;
  const size_t count = 4099;
  SimNcclRanks R = make_ranks(N);
  auto errors = run_ranks(N, [&](int r) {
    DevTensor buf(DType::f32, count);
    for (size_t i = 0; i < count; ++i) buf.set(i, value_of(r, i));
    std::atomic<bool> host_form_ran{false};
    std::vector<float> seen(count, -100.0f);
    void* stream_seen = nullptr;
    float* view = reinterpret_cast<float*>(buf.host(count * 4));
    WorkHandle h = R.comms[r]->all_reduce_async(
        buf.data(), count, DType::f32, ReduceOp::sum, OnDone::on_stream([&](void* stream) {
          stream_seen = stream;
          // Queued on the comm stream now; it runs after the collective.
          static_cast<sim::Stream*>(stream)->enqueue([&] { std::memcpy(seen.data(), view, count * 4); });
        }));
    RANK_REQUIRE(stream_seen != nullptr);  // ran at issue, with the comm stream
    WorkHandle h2 = R.comms[r]->all_reduce_async(buf.data(), 1, DType::f32, ReduceOp::sum, [&] { host_form_ran = true; });
    h->wait();
    for (size_t i = 0; i < count; ++i) RANK_REQUIRE(seen[i] == expected_reduce(N, i, ReduceOp::sum, DType::f32));
    h2->wait();
    RANK_REQUIRE(host_form_ran);
  });
  for (auto& e : errors) CHECK(e == "");
}

TEST_CASE("nccl on the simulated device: a rank that never joins fails the others within the timeout", "[comm][sim]") {
  SimNcclRanks R = make_ranks(2, 2.0);
  DevTensor buf(DType::f32, 100);
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    R.comms[0]->all_reduce(buf.data(), 100, DType::f32, ReduceOp::sum);
  } catch (const Error& e) {
    error = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 20.0);
  CHECK(error.find("rank 0: all_reduce #1 (nccl): ") == 0);
  // Every later call repeats the error.
  CHECK_THROWS_WITH(R.comms[0]->barrier(), Catch::Contains("rank 0: all_reduce #1 (nccl)"));
}

namespace {

// A device clock that notes the stream of every stamp (null: the compute stream) and
// reads stamp k as 10 k microseconds after its origin.
struct StreamNotingClock : trace::DeviceClock {
  std::vector<void*> streams;  // by ticket; the trace recorder's lock orders the calls
  void set_origin() override {}
  uint64_t stamp() override { return stamp_on(nullptr); }
  uint64_t stamp_on(void* stream) override {
    streams.push_back(stream);
    return streams.size() - 1;
  }
  double since_origin_us(uint64_t ticket) override { return 10.0 * double(ticket); }
  void recycle() override { streams.clear(); }
};

}  // namespace

TEST_CASE("nccl on the simulated device: --trace spans are stamps on the comm stream", "[comm][sim][trace]") {
  const int N = 2;
  const size_t count = 1001;
  SimNcclRanks R = make_ranks(N);
  std::vector<StreamNotingClock> clocks(N);
  for (int r = 0; r < N; ++r) trace::set_device_clock(r, &clocks[r]);
  trace::start();
  std::vector<std::vector<void*>> seen(N);
  auto errors = run_ranks(N, [&](int r) {
    DevTensor buf(DType::f32, count), out(DType::f32, count);
    R.comms[r]->all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
    trace::set_bucket(3);
    R.comms[r]->reduce_scatter_async(buf.data(), out.data(), count, DType::f32, ReduceOp::sum)->wait();
    trace::set_bucket(-1);
    R.comms[r]->all_gather(out.data(), buf.data(), count, DType::f32);
  });
  for (auto& e : errors) CHECK(e == "");
  for (int r = 0; r < N; ++r) seen[r] = clocks[r].streams;  // before resolve() recycles them
  trace::resolve();
  trace::stop();
  for (int r = 0; r < N; ++r) {
    INFO("rank " << r);
    CHECK(trace::count_spans(r, trace::Track::comm) == 3);
    REQUIRE(seen[r].size() == 6);  // two ends per collective, all on the one comm stream
    for (void* s : seen[r]) CHECK((s != nullptr && s == seen[r][0]));
    const std::string ev = trace::rank_events_json(r);
    CHECK(ev.find("\"name\":\"reduce_scatter\"") != std::string::npos);
    CHECK(ev.find("\"bucket\":3") != std::string::npos);
    CHECK(ev.find("\"dur\":10.000") != std::string::npos);  // tickets 2k and 2k + 1
    trace::set_device_clock(r, nullptr);
  }
}
