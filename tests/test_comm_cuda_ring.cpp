// The ring's cuda transport, the parts that run without a GPU (comm/transport/device_ring.h):
//   - the inbox record (IPC handle and slot geometry) through the rendezvous store: its
//     text form, malformed values refused with one line naming the key, the job token;
//   - the whole transport (data segments into the right neighbour's inbox slots, notices
//     on a host control channel, RingCommunicator's input marks and final synchronize)
//     over a fake device whose "stream" is a queue that runs only at synchronize(), so a
//     missing synchronize leaves wrong data behind. Ranks are threads with thread-transport
//     control channels. Every collective must give bitwise the CPU ring's results, round
//     by round the same chunks and the same byte counts, and all_reduce must equal
//     reduce_scatter + all_gather bitwise;
//   - the one-line refusals of --comm ring with GPU buffers where it cannot run.
// The same transport on a real GPU: test_comm_cuda_ring_gpu (device-check).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>

#include "comm/factory.h"
#include "comm/transport/device_ring.h"
#include "comm/ring_communicator.h"
#include "comm/rendezvous/store.h"
#include "comm/transport/transports.h"
#include "run_ringzero.h"
#include "test_comm_util.h"

using namespace rz;
using rz::testing::expected_reduce;
using rz::testing::gather_value;
using rz::testing::value_of;

namespace {

// Work queued on a rank's "input stream" (the compute stream that produces its buffers).
class FakeInputStream {
 public:
  void enqueue(std::function<void()> op) {
    std::lock_guard<std::mutex> l(mu_);
    ops_.push_back(std::move(op));
  }
  size_t enqueued() {
    std::lock_guard<std::mutex> l(mu_);
    return ops_.size();
  }
  size_t ran() {
    std::lock_guard<std::mutex> l(mu_);
    return ran_;
  }
  void run_until(size_t n) {
    std::lock_guard<std::mutex> l(mu_);
    for (; ran_ < n; ++ran_) ops_[ran_]();
  }

 private:
  std::mutex mu_;
  std::deque<std::function<void()>> ops_;
  size_t ran_ = 0;
};

// A GPU whose memory is host memory and whose comm stream runs only at synchronize().
class FakeLink final : public DeviceLink {
 public:
  FakeLink(size_t inbox_bytes, FakeInputStream* input) : inbox_(inbox_bytes + 1), input_(input) {}
  int device() const override { return 0; }
  void* inbox() override { return inbox_.data(); }
  size_t handle_bytes() const override { return sizeof(void*); }
  std::string inbox_handle() override {
    void* p = inbox_.data();
    return std::string(reinterpret_cast<const char*>(&p), sizeof p);
  }
  void* open_inbox(const InboxRecord& right) override {
    void* p = nullptr;
    std::memcpy(&p, right.handle.data(), sizeof p);
    return p;
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    stream_.push_back([=] { std::memcpy(dst, src, bytes); });
  }
  void reduce(DType dt, void* dst, const void* a, const void* b, size_t n, int divide_by) override {
    stream_.push_back([=] { reduce_elements(dt, dst, a, b, n, divide_by); });
  }
  void* scratch(size_t bytes) override {
    if (bytes > scratch_.size()) {
      synchronize();
      scratch_.assign(bytes, 0);
    }
    return scratch_.data();
  }
  void synchronize() override {
    for (auto& op : stream_) op();
    stream_.clear();
    ++syncs;
  }
  std::shared_ptr<void> mark_input() override {
    return std::make_shared<size_t>(input_ != nullptr ? input_->enqueued() : 0);
  }
  void wait_input(const std::shared_ptr<void>& mark) override {
    const size_t n = *static_cast<size_t*>(mark.get());
    FakeInputStream* in = input_;
    if (in != nullptr) stream_.push_back([in, n] { in->run_until(n); });
  }
  // "Host memory" is whatever the test declared so; everything else is the fake GPU's.
  bool is_host_memory(const void* p) override {
    std::lock_guard<std::mutex> l(host_mu_);
    for (auto [lo, n] : host_)
      if (p >= lo && p < static_cast<const char*>(lo) + n) return true;
    return false;
  }
  void declare_host(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> l(host_mu_);
    host_.push_back({p, bytes});
  }

  void* host_staging(size_t bytes) override { return grow(host_stage_, bytes); }
  void* device_staging(size_t bytes) override { return grow(dev_stage_, bytes); }

  int syncs = 0;

 private:
  std::vector<unsigned char> inbox_, scratch_;
  std::deque<std::function<void()>> stream_;
  FakeInputStream* input_;
  void* grow(std::vector<unsigned char>& v, size_t bytes) {
    if (bytes > v.size()) {
      synchronize();  // as the real link: queued copies may still use the old one
      v.assign(bytes, 0);
    }
    return v.data();
  }
  std::mutex host_mu_;
  std::vector<std::pair<const void*, size_t>> host_;
  std::vector<unsigned char> host_stage_, dev_stage_;
};

// Every round of one rank (RingObserver), without the data pointers.
struct RoundLog final : RingObserver {
  std::vector<std::array<long, 6>> rounds;
  void on_round(const RingRound& r) override {
    rounds.push_back({long(r.phase), r.round, r.end, r.sent_chunk, r.recv_chunk, long(r.data_count)});
  }
};

struct CudaRingRanks {
  std::unique_ptr<StoreServer> server;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<FakeLink>> links;
  std::vector<FakeInputStream> inputs;
};

// N thread ranks over the cuda transport with fake devices, connected through a real store.
CudaRingRanks make_fake_cuda_ranks(int N, const CommOptions& opts, bool staging = false) {
  CudaRingRanks R;
  R.server = std::make_unique<StoreServer>(0, "fake-cuda-token");
  R.inputs = std::vector<FakeInputStream>(N);
  auto inboxes = std::make_shared<std::vector<std::unique_ptr<HeapSlotRing>>>();
  for (int r = 0; r < N; ++r) inboxes->push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, 64));
  auto stage_rings = std::make_shared<std::vector<std::unique_ptr<HeapSlotRing>>>();
  for (int r = 0; r < N && staging; ++r)
    stage_rings->push_back(std::make_unique<HeapSlotRing>(kSlotsPerEdge, slot_bytes_for(opts)));
  const uint32_t nslots = cuda_inbox_slots();
  for (int r = 0; r < N; ++r) R.links.push_back(std::make_shared<FakeLink>(nslots * opts.segment_bytes, &R.inputs[r]));
  R.comms.resize(N);
  auto errors = rz::testing::run_ranks(N, [&](int r) {
    StoreClient store("127.0.0.1", R.server->port(), "fake-cuda-token", 10.0);
    InboxRecord mine;
    mine.pid = static_cast<int>(getpid());
    mine.nslots = nslots;
    mine.slot_bytes = opts.segment_bytes;
    mine.handle = R.links[r]->inbox_handle();
    InboxRecord right = exchange_inbox_records(store, r, N, mine, R.links[r]->handle_bytes());
    auto control = make_slot_channel((*inboxes)[(r + 1) % N]->ring(), (*inboxes)[r]->ring(), r, N, opts.timeout_s,
                                     false, inboxes);
    if (staging) {  // the across-hosts form: host channel of segment-sized slots
      auto host = make_slot_channel((*stage_rings)[(r + 1) % N]->ring(), (*stage_rings)[r]->ring(), r, N,
                                    opts.timeout_s, false, stage_rings);
      auto c = std::make_unique<RingCommunicator>(r, N, "cuda-tcp", make_staging_ring_channel(std::move(host), R.links[r]),
                                                  opts);
      c->set_device(R.links[r]);
      R.comms[r] = std::move(c);
      return;
    }
    auto ch = make_device_ring_channel(std::move(control), kSlotsPerEdge, R.links[r], R.links[r]->open_inbox(right),
                                       nslots, opts.segment_bytes, r, N);
    auto c = std::make_unique<RingCommunicator>(r, N, "cuda", std::move(ch), opts);
    c->set_device(R.links[r]);
    R.comms[r] = std::move(c);
  });
  for (auto& e : errors) REQUIRE(e.empty());
  return R;
}

// One rank's run of every collective; returns every output byte in order (for bitwise
// comparison) and checks closed forms on the way (RANK_REQUIRE).
std::vector<unsigned char> run_collectives(Communicator& c, const std::vector<size_t>& counts) {
  const int N = c.size(), r = c.rank();
  std::vector<unsigned char> all;
  auto keep = [&](const rz::testing::Tensor& t, size_t n) {
    all.insert(all.end(), t.bytes.begin(), t.bytes.begin() + long(n * dtype_size(t.dt)));
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (size_t count : counts) {
      const ShardRange mine = shard_of(count, N, r);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        rz::testing::Tensor t(dt, count), s(dt, mine.count), g(dt, count);
        for (size_t i = 0; i < count; ++i) t.set(i, value_of(r, i));
        c.all_reduce(t.data(), count, dt, op);
        for (size_t i = 0; i < count; ++i) RANK_REQUIRE(t.get(i) == expected_reduce(N, i, op, dt));
        keep(t, count);
        // all_reduce == reduce_scatter + all_gather, bitwise
        for (size_t i = 0; i < count; ++i) g.set(i, value_of(r, i));
        c.reduce_scatter(g.data(), s.data(), count, dt, op);
        for (size_t i = 0; i < mine.count; ++i) RANK_REQUIRE(s.get(i) == expected_reduce(N, mine.offset + i, op, dt));
        c.all_gather(s.data(), g.data(), count, dt);
        RANK_REQUIRE(std::memcmp(g.data(), t.data(), count * dtype_size(dt)) == 0);
        keep(s, mine.count);
      }
      // all_gather of known shards, broadcast from the last rank, a barrier
      rz::testing::Tensor s(dt, mine.count), g(dt, count), b(dt, count);
      for (size_t i = 0; i < mine.count; ++i) s.set(i, gather_value(mine.offset + i));
      c.all_gather(s.data(), g.data(), count, dt);
      for (size_t i = 0; i < count; ++i) RANK_REQUIRE(g.get(i) == gather_value(i));
      keep(g, count);
      for (size_t i = 0; i < count; ++i) b.set(i, r == N - 1 ? gather_value(i) : -1.0f);
      c.broadcast(b.data(), count, dt, N - 1);
      for (size_t i = 0; i < count; ++i) RANK_REQUIRE(b.get(i) == gather_value(i));
      keep(b, count);
      c.barrier();
      // async, in issue order: reduce_scatter then all_gather of its result, in place
      rz::testing::Tensor a(dt, count);
      for (size_t i = 0; i < count; ++i) a.set(i, value_of(r, i));
      std::vector<int> order;
      char* base = static_cast<char*>(a.data());
      auto h1 = c.reduce_scatter_async(base, base + mine.offset * dtype_size(dt), count, dt, ReduceOp::sum,
                                       [&] { order.push_back(1); });
      auto h2 = c.all_gather_async(base + mine.offset * dtype_size(dt), base, count, dt, [&] { order.push_back(2); });
      h2->wait();
      h1->wait();
      RANK_REQUIRE((order == std::vector<int>{1, 2}));
      for (size_t i = 0; i < count; ++i) RANK_REQUIRE(a.get(i) == expected_reduce(N, i, ReduceOp::sum, dt));
      keep(a, count);
    }
  return all;
}

}  // namespace

TEST_CASE("cuda transport: inbox records round-trip and malformed text is refused") {
  InboxRecord rec;
  rec.pid = 4242;
  rec.device = 3;
  rec.nslots = 5;
  rec.slot_bytes = 16u << 20;
  for (int b = 0; b < 64; ++b) rec.handle.push_back(static_cast<char>(b * 4 + 3));
  const std::string s = encode_inbox_record(rec);
  InboxRecord back;
  REQUIRE(decode_inbox_record(s, back));
  CHECK(back.pid == 4242);
  CHECK(back.device == 3);
  CHECK(back.nslots == 5);
  CHECK(back.slot_bytes == (16u << 20));
  CHECK(back.handle == rec.handle);
  InboxRecord untouched;
  for (const std::string& bad : {std::string(""), s.substr(0, s.size() - 1), s + " 1", s + "0", "x" + s,
                                std::string("4242 3 5 16777216"), std::string("4242 3 0 16777216 00"),
                                std::string("4242 3 5 0 00"), std::string("0 3 5 16 00"), std::string("4242 3 5 16 0g"),
                                std::string("4242 3 5 16 AB"), std::string("4242  3 5 16 00"),
                                std::string("-1 3 5 16 00"), std::string("4242 3 5 99999999999999999999 00")}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(decode_inbox_record(bad, untouched));
  }
  CHECK(untouched.pid == 0);
}

TEST_CASE("cuda transport: inbox records go through the store to the left neighbour, checked") {
  StoreServer server(0, "tok-cuda");
  const int N = 3;
  std::vector<InboxRecord> got(N);
  auto errors = rz::testing::run_ranks(N, [&](int r) {
    StoreClient c("127.0.0.1", server.port(), "tok-cuda", 10.0);
    InboxRecord mine;
    mine.pid = 100 + r;
    mine.device = r;
    mine.nslots = 5;
    mine.slot_bytes = 1024;
    mine.handle = std::string(8, static_cast<char>('a' + r));
    got[r] = exchange_inbox_records(c, r, N, mine, 8);
  });
  for (auto& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < N; ++r) {  // rank r holds its right neighbour's record
    CHECK(got[r].pid == 100 + (r + 1) % N);
    CHECK(got[r].handle == std::string(8, static_cast<char>('a' + (r + 1) % N)));
  }

  InboxRecord mine;
  mine.pid = 7;
  mine.nslots = 5;
  mine.slot_bytes = 1024;
  mine.handle = std::string(8, 'z');
  StoreClient w("127.0.0.1", server.port(), "tok-cuda", 5.0);
  w.set(inbox_key(11), "not a record");
  REQUIRE_THROWS_WITH(exchange_inbox_records(w, 10, 12, mine, 8),
                      Catch::Contains("cuda_inbox/11") && Catch::Contains("not an inbox record"));
  InboxRecord other = mine;
  other.handle = std::string(4, 'y');
  w.set(inbox_key(21), encode_inbox_record(other));
  REQUIRE_THROWS_WITH(exchange_inbox_records(w, 20, 22, mine, 8),
                      Catch::Contains("cuda_inbox/21") && Catch::Contains("4-byte IPC handle, expected 8"));
  other = mine;
  other.slot_bytes = 2048;
  w.set(inbox_key(31), encode_inbox_record(other));
  REQUIRE_THROWS_WITH(exchange_inbox_records(w, 30, 32, mine, 8), Catch::Contains("--segment-bytes"));
  // Another job's token never reaches the store, so it can neither read nor plant a handle.
  REQUIRE_THROWS_WITH(StoreClient("127.0.0.1", server.port(), "tok-other", 5.0),
                      Catch::Contains("wrong RINGZERO_JOB_TOKEN"));
}

TEST_CASE("cuda transport (fake device): every collective bitwise as the CPU ring, same rounds and bytes") {
  for (bool staging : {false, true})
  for (int N : {1, 2, 3, 4}) {
    for (size_t seg : {size_t(24), size_t(4096)}) {  // 24 B: 6 fp32 / 12 bf16 elements, many segments
      INFO(N << " ranks, segment " << seg << (staging ? ", staged through host memory (across hosts)" : ""));
      CommOptions opts;
      opts.timeout_s = 30;
      opts.segment_bytes = seg;
      const std::vector<size_t> counts{0, 1, size_t(N) + 1, 7, 1001};
      std::vector<std::vector<unsigned char>> cpu_out(N), dev_out(N);
      std::vector<RoundLog> cpu_log(N), dev_log(N);
      std::vector<CommStats> cpu_stats(N), dev_stats(N);

      auto cpu = make_thread_communicators(N, opts);
      for (int r = 0; r < N; ++r) static_cast<RingCommunicator&>(*cpu[r]).set_observer(&cpu_log[r]);
      auto e1 = rz::testing::run_ranks(N, [&](int r) {
        cpu_out[r] = run_collectives(*cpu[r], counts);
        cpu_stats[r] = cpu[r]->stats();
      });
      for (auto& e : e1) REQUIRE(e.empty());

      std::unique_ptr<CudaRingRanks> ranks;  // outlives the communicators (their links' input streams)
      std::vector<std::unique_ptr<Communicator>> dev;
      std::vector<std::shared_ptr<FakeLink>> links;
      if (N == 1) {
        links.push_back(std::make_shared<FakeLink>(0, nullptr));
        auto c = std::make_unique<RingCommunicator>(0, 1, "cuda", nullptr, opts);
        c->set_device(links[0]);
        dev.push_back(std::move(c));
      } else {
        ranks = std::make_unique<CudaRingRanks>(make_fake_cuda_ranks(N, opts, staging));
        dev = std::move(ranks->comms);
        links = ranks->links;
      }
      for (int r = 0; r < N; ++r) static_cast<RingCommunicator&>(*dev[r]).set_observer(&dev_log[r]);
      auto e2 = rz::testing::run_ranks(N, [&](int r) {
        dev_out[r] = run_collectives(*dev[r], counts);
        dev_stats[r] = dev[r]->stats();
      });
      for (auto& e : e2) REQUIRE(e.empty());

      for (int r = 0; r < N; ++r) {
        CHECK(dev_out[r] == cpu_out[r]);
        CHECK(dev_log[r].rounds == cpu_log[r].rounds);
        for (int k = 0; k < kNumCollectiveKinds; ++k) {
          CHECK(dev_stats[r].by_kind[k].calls == cpu_stats[r].by_kind[k].calls);
          CHECK(dev_stats[r].by_kind[k].bytes_sent == cpu_stats[r].by_kind[k].bytes_sent);
          CHECK(dev_stats[r].by_kind[k].bytes_recv == cpu_stats[r].by_kind[k].bytes_recv);
        }
        CHECK(links[r]->syncs > 0);
      }
    }
  }
}

TEST_CASE("cuda transport (fake device): a collective follows the input stream up to its issue, no further") {
  CommOptions opts;
  opts.timeout_s = 30;
  opts.segment_bytes = 64;
  const int N = 3;
  CudaRingRanks R = make_fake_cuda_ranks(N, opts);
  const size_t count = 101;
  std::vector<std::vector<float>> buf(N, std::vector<float>(count, -7.0f)), later(N, std::vector<float>(1, 0.0f));
  std::vector<size_t> ran_at_done(N);
  auto errors = rz::testing::run_ranks(N, [&](int r) {
    // The input stream fills the buffer (not yet run), the collective is issued, then more
    // input work is queued that the collective must not wait for.
    R.inputs[r].enqueue([&, r] {
      for (size_t i = 0; i < count; ++i) buf[r][i] = value_of(r, i);
    });
    auto h = R.comms[r]->all_reduce_async(buf[r].data(), count, DType::f32, ReduceOp::sum,
                                          [&, r] { ran_at_done[r] = R.inputs[r].ran(); });
    R.inputs[r].enqueue([&, r] { later[r][0] = 1.0f; });
    h->wait();
    for (size_t i = 0; i < count; ++i) RANK_REQUIRE(buf[r][i] == expected_reduce(N, i, ReduceOp::sum, DType::f32));
  });
  for (auto& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < N; ++r) {
    CHECK(ran_at_done[r] == 1);  // the fill, not the later op
    CHECK(later[r][0] == 0.0f);
  }
}

TEST_CASE("cuda transport (fake device): host buffers go over the host channel, between device collectives") {
  CommOptions opts;
  opts.timeout_s = 30;
  opts.segment_bytes = 32;
  const int N = 3;
  CudaRingRanks R = make_fake_cuda_ranks(N, opts);
  std::vector<int> syncs_before(N), syncs_after(N);
  auto errors = rz::testing::run_ranks(N, [&](int r) {
    Communicator& c = *R.comms[r];
    const size_t count = 37;
    std::vector<float> dev(count), host(count), host_all(count * N);
    R.links[r]->declare_host(host.data(), host.size() * sizeof(float));
    R.links[r]->declare_host(host_all.data(), host_all.size() * sizeof(float));
    for (int k = 0; k < 3; ++k) {
      for (size_t i = 0; i < count; ++i) dev[i] = host[i] = value_of(r, i + k);
      c.all_reduce(dev.data(), count, DType::f32, ReduceOp::sum);  // device path
      syncs_before[r] = R.links[r]->syncs;
      c.all_reduce(host.data(), count, DType::f32, ReduceOp::sum);  // host path: no device work
      syncs_after[r] = R.links[r]->syncs;
      RANK_REQUIRE(std::memcmp(dev.data(), host.data(), count * sizeof(float)) == 0);
      c.all_gather(host.data(), host_all.data(), count * N, DType::f32);
      for (int q = 0; q < N; ++q)
        RANK_REQUIRE(std::memcmp(&host_all[q * count], host.data(), count * sizeof(float)) == 0);
    }
    bool refused = false;
    try {
      c.all_gather(dev.data(), host_all.data(), count * N, DType::f32);  // device shard, host output
    } catch (const Error& e) {
      refused = std::string(e.what()).find("host and GPU buffers in one collective") != std::string::npos;
    }
    RANK_REQUIRE(refused);
  });
  for (auto& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < N; ++r) CHECK(syncs_after[r] == syncs_before[r]);
}

TEST_CASE("cuda transport: fewer device slots than the control channel's lookahead + 1 is refused") {
  auto inbox = std::make_shared<HeapSlotRing>(kSlotsPerEdge, 64);
  auto control = make_slot_channel(inbox->ring(), inbox->ring(), 0, 2, 5.0, false, inbox);
  auto link = std::make_shared<FakeLink>(kSlotsPerEdge * 64, nullptr);
  REQUIRE_THROWS_WITH(make_device_ring_channel(std::move(control), kSlotsPerEdge, link, link->inbox(), kSlotsPerEdge,
                                               64, 0, 2),
                      Catch::Contains("needs at least 5"));
}

TEST_CASE("ring with GPU buffers: where it cannot run, one line before any rendezvous") {
  const std::string why = cuda_ring_unavailable();
  CommOptions o;
  o.device = Device{DeviceKind::cuda, 0};
  o.timeout_s = 600;
  RankEnv env;
  env.world_size = 2;
  env.job_token.assign(8, 'x');
  if (!why.empty()) {
    REQUIRE_THROWS_WITH(connect_communicator(env, o), Catch::StartsWith("comm ring with GPU buffers: ") &&
                                                          Catch::Contains(why));
  } else {
    WARN("a GPU is here: the no-GPU error path is not exercised");
  }
}

TEST_CASE("comm-bench: GPU buffers of the ring need rank processes, one line") {
  if (!std::filesystem::exists(RINGZERO_BINARY)) {  // the TSan build has no binary
    WARN("no ringzero binary in this build");
    return;
  }
  const std::string why = cuda_ring_unavailable();
  if (!why.empty()) {
    const auto r = test::run_ringzero("comm-bench --comm ring --device cuda --nproc 2 --max-bytes 1K", 60);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("comm ring with GPU buffers") != std::string::npos);
  }
  const auto t = test::run_ringzero("comm-bench --comm ring --device cuda --transport thread --nproc 2", 60);
  CHECK(t.status != 0);
  CHECK(t.output.find("not as threads") != std::string::npos);
}
