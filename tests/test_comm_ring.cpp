// Tests of the ring collectives on thread ranks: every op x dtype x sum/avg for N in 1..8
// and counts {0, 1, N-1, N+1, 1001}, with an 8-byte segment so every count above two
// elements takes the multi-segment path; byte counters against the ring formula.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "comm/ring/bulk_copy.h"
#include "comm/factory.h"
#include "comm/ring/ring.h"
#include "comm/ring_communicator.h"
#include "test_comm_util.h"

using namespace rz;
using namespace rz::testing;

namespace {

CommOptions tiny_segments() {
  CommOptions o;
  o.segment_bytes = 8;
  o.timeout_s = 60;
  return o;
}

// Every collective for every count on N thread ranks.
void check_all(int N, DType dt) {
  auto comms = make_thread_communicators(N, tiny_segments());
  auto errors = run_ranks(N, [&](int r) { check_collectives(*comms[r], dt); });
  for (int r = 0; r < N; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

}  // namespace

TEST_CASE("shard_of: ceil-sized shards, trailing ones shorter or empty") {
  REQUIRE(shard_of(10, 4, 0).count == 3);
  REQUIRE(shard_of(10, 4, 3).offset == 9);
  REQUIRE(shard_of(10, 4, 3).count == 1);
  REQUIRE(shard_of(5, 4, 3).count == 0);  // S = 2: shards 2, 2, 1, 0
  REQUIRE(shard_of(5, 4, 3).offset == 5);
  REQUIRE(shard_of(0, 3, 1).count == 0);
  REQUIRE_THROWS_AS(shard_of(4, 2, 2), Error);
}

TEST_CASE("bulk_copy copies every byte at any alignment, below and above the streaming threshold") {
  const size_t sizes[] = {0, 1, 63, 64, 1000, kStreamCopyBytes - 1, kStreamCopyBytes, kStreamCopyBytes + 77};
  std::vector<unsigned char> src(kStreamCopyBytes + 256), dst(kStreamCopyBytes + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t n : sizes)
    for (size_t doff : {0, 1, 33}) {
      std::fill(dst.begin(), dst.end(), 0xAB);
      bulk_copy(dst.data() + doff, src.data() + 5, n);
      INFO("n " << n << " dst offset " << doff);
      CHECK(std::memcmp(dst.data() + doff, src.data() + 5, n) == 0);
      CHECK(dst[doff + n] == 0xAB);  // nothing written past the end
      if (doff > 0) CHECK(dst[doff - 1] == 0xAB);
    }
}

TEST_CASE("reduce_elements: bf16 adds in fp32 and rounds once, avg divides after the sum") {
  bf16 a[1] = {float_to_bf16(1.0f)}, b[1] = {float_to_bf16(std::ldexp(1.0f, -8))}, d[1];
  reduce_elements(DType::bf16, d, a, b, 1, 0);
  REQUIRE(bf16_to_float(d[0]) == 1.0f);  // 1 + 2^-8 ties to even
  float x[2] = {3, 1}, y[2] = {4, 1}, z[2];
  reduce_elements(DType::f32, z, x, y, 2, 2);
  REQUIRE(z[0] == 3.5f);
  REQUIRE(z[1] == 1.0f);
}

TEST_CASE("ring collectives on thread ranks, fp32, N = 1..8") {
  for (int N = 1; N <= 8; ++N) {
    INFO("N = " << N);
    check_all(N, DType::f32);
  }
}

TEST_CASE("ring collectives on thread ranks, bf16, N = 1..8") {
  for (int N = 1; N <= 8; ++N) {
    INFO("N = " << N);
    check_all(N, DType::bf16);
  }
}

TEST_CASE("AllReduce sends exactly 2(N-1)/N x M per rank when N divides the count") {
  const int N = 4;
  const size_t count = 4096;
  CommOptions o;
  o.segment_bytes = 1000;  // not a multiple of the element size: segments of 250 floats
  auto comms = make_thread_communicators(N, o);
  run_ranks(N, [&](int r) {
    std::vector<float> buf(count, 1.0f);
    comms[r]->all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < N; ++r) {
    const auto& c = comms[r]->stats().by_kind[int(CollectiveKind::all_reduce)];
    REQUIRE(c.calls == 1);
    REQUIRE(c.bytes_sent == 2 * (N - 1) * count * 4 / N);
    REQUIRE(c.bytes_recv == 2 * (N - 1) * count * 4 / N);
    REQUIRE(c.seconds > 0);
  }
}

namespace {

// Inputs whose sums depend on the order of the adds (magnitudes 2^-10 .. 2^9, both signs,
// thirds), so "bitwise the ring's result" is a real check, not one that any order passes.
float order_sensitive_value(int rank, size_t i) {
  uint32_t h = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>((rank + 1) * 40503u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  const float mant = static_cast<float>(static_cast<int>(h % 2001u) - 1000) / 3.0f;
  return std::ldexp(mant, static_cast<int>((h >> 11) % 20u) - 10);
}

class NoopObserver final : public RingObserver {
 public:
  void on_round(const RingRound&) override {}
};

}  // namespace

TEST_CASE("small AllReduce (N = 2, 3, 4) is bitwise the ring's result and reduce_scatter + all_gather") {
  for (int N = 2; N <= 4; ++N) {
    auto small = make_thread_communicators(N, CommOptions{});
    // An observer (what comm-trace installs) keeps every AllReduce on the ring.
    auto ring = make_thread_communicators(N, CommOptions{});
    NoopObserver observer;
    for (auto& c : ring) dynamic_cast<RingCommunicator&>(*c).set_observer(&observer);
    for (DType dt : {DType::f32, DType::bf16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        for (size_t count : {size_t(1), size_t(3), size_t(5), size_t(7), size_t(33), size_t(101), size_t(1023), size_t(1025)}) {
          INFO("N = " << N << " " << dtype_name(dt) << " " << reduce_op_name(op) << " count " << count);
          const size_t esz = dtype_size(dt);
          const bool takes_small_path = count * esz <= (N == 2 ? kSmallAllReduceBytes : kSmallAllReduceManyBytes);
          auto errors = run_ranks(N, [&](int r) {
            Tensor a(dt, count), b(dt, count), in(dt, count), full(dt, count);
            for (size_t i = 0; i < count; ++i) {
              a.set(i, order_sensitive_value(r, i));
              b.set(i, order_sensitive_value(r, i));
              in.set(i, order_sensitive_value(r, i));
            }
            small[r]->reset_stats();
            small[r]->all_reduce(a.data(), count, dt, op);
            ring[r]->all_reduce(b.data(), count, dt, op);
            const ShardRange mine = shard_of(count, N, r);
            Tensor shard(dt, mine.count);
            ring[r]->reduce_scatter(in.data(), shard.data(), count, dt, op);
            ring[r]->all_gather(shard.data(), full.data(), count, dt);
            RANK_REQUIRE(std::memcmp(a.data(), b.data(), count * esz) == 0);
            RANK_REQUIRE(std::memcmp(a.data(), full.data(), count * esz) == 0);
            const uint64_t sent = small[r]->stats().by_kind[int(CollectiveKind::all_reduce)].bytes_sent;
            RANK_REQUIRE(sent == (takes_small_path ? (N - 1) * count * esz
                                                   : rs_bytes_sent(count, N, r, dt) + ag_bytes_sent(count, N, r, dt)));
          });
          for (int r = 0; r < N; ++r) {
            INFO("rank " << r << ": " << errors[r]);
            CHECK(errors[r].empty());
          }
        }
      }
    }
  }
}

namespace {

// A channel that records the messages a chunk cursor sends and replays them to the
// receiving cursor: starts_direct from `threshold` bytes, send_direct references a chunk
// or sends the note as `reference` says.
class RecordingChannel final : public RingChannel {
 public:
  RecordingChannel(size_t threshold, bool reference) : threshold_(threshold), reference_(reference) {}
  void send(const void* src, size_t bytes, MsgTag tag) override {
    const auto* p = static_cast<const unsigned char*>(src);
    log.push_back({tag, bytes, std::vector<unsigned char>(p, p + bytes)});
  }
  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) override {
    REQUIRE(next_ < log.size());
    const Msg& m = log[next_++];
    REQUIRE(m.tag == tag);
    REQUIRE(m.bytes == bytes);
    consume(m.payload.data());
  }
  size_t max_message_bytes() const override { return 1 << 20; }
  void close() override {}
  bool direct_reads() const override { return true; }
  bool starts_direct(size_t bytes) const override { return bytes >= threshold_; }
  bool send_direct(const void* src, size_t bytes) override {
    referenced_src_ = static_cast<const unsigned char*>(src);
    log.push_back({MsgTag::direct, bytes, {}});
    return reference_;
  }
  bool recv_direct(void* dst, size_t bytes) override {
    REQUIRE(next_ < log.size());
    const Msg& m = log[next_++];
    REQUIRE(m.tag == MsgTag::direct);
    REQUIRE(m.bytes == bytes);
    if (!reference_) return false;
    std::memcpy(dst, referenced_src_, bytes);
    return true;
  }

  struct Msg {
    MsgTag tag;
    size_t bytes;
    std::vector<unsigned char> payload;
  };
  std::vector<Msg> log;

 private:
  size_t threshold_;
  bool reference_;
  size_t next_ = 0;
  const unsigned char* referenced_src_ = nullptr;
};

}  // namespace

TEST_CASE("chunk cursors: segments, a reference, or the note and then segments, as the channel decides") {
  std::vector<unsigned char> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  struct Case {
    size_t bytes;
    bool readable, reference;
    std::vector<MsgTag> tags;
  };
  // threshold 100 bytes, segments of 300
  const std::vector<Case> cases = {
      {0, true, true, {}},
      {99, true, true, {MsgTag::data}},                                 // under the threshold: segments
      {1000, false, true, {MsgTag::data, MsgTag::data, MsgTag::data, MsgTag::data}},  // not readable in place
      {1000, true, true, {MsgTag::direct}},                             // one reference
      {1000, true, false, {MsgTag::direct, MsgTag::data, MsgTag::data, MsgTag::data, MsgTag::data}},  // the note
  };
  for (const Case& c : cases) {
    INFO("bytes " << c.bytes << " readable " << c.readable << " reference " << c.reference);
    RecordingChannel ch(100, c.reference);
    OutgoingChunk out(ch, reinterpret_cast<const char*>(src.data()), c.bytes, 300, c.readable);
    size_t sent = 0;
    while (!out.done()) sent += out.send_next();
    CHECK(sent == c.bytes);
    CHECK(out.referenced() == (c.readable && c.reference && c.bytes >= 100));
    std::vector<MsgTag> tags;
    for (const auto& m : ch.log) tags.push_back(m.tag);
    CHECK(tags == c.tags);
    std::vector<unsigned char> dst(c.bytes, 0);
    IncomingChunk in(ch, reinterpret_cast<char*>(dst.data()), c.bytes, 300, c.readable);
    size_t received = 0;
    while (!in.done())
      received += in.recv_next([&](size_t first, size_t n, const void* p) { std::memcpy(dst.data() + first, p, n); });
    CHECK(received == c.bytes);
    CHECK(std::equal(dst.begin(), dst.end(), src.begin()));
  }
}
