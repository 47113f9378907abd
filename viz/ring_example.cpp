// viz/ring_example.cpp: the article's [1,2,3,4] / [5,6,7,8] example and one chunk's path,
// both read off the real ring through its RingObserver.
#include "viz/ring_example.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "base/check.h"
#include "comm/factory.h"
#include "comm/ring/ring.h"
#include "comm/ring_communicator.h"

namespace rz {
namespace {

// One observed half-round: begin (the chunk about to be sent) or end (the received chunk as
// the receiver holds it afterwards). Values are copied at once: the ring reuses its buffers.
struct Seen {
  CollectiveKind phase;
  int round;
  bool end;
  int sent_chunk, recv_chunk;
  std::vector<float> values;
};

class Watcher final : public RingObserver {
 public:
  std::vector<Seen> seen;
  void on_round(const RingRound& r) override {
    RZ_CHECK(r.dtype == DType::f32, "ring example: expected fp32 rounds");
    const float* p = static_cast<const float*>(r.data);
    seen.push_back(Seen{r.phase, r.round, r.end, r.sent_chunk, r.recv_chunk,
                        std::vector<float>(p, p + r.data_count)});
  }
};

// Runs body(rank, comm) on N thread ranks, each watched; returns what each rank saw and,
// in bytes_sent (when given), the payload bytes each rank's counters say it sent.
std::vector<std::vector<Seen>> run_watched(int N, const std::function<void(int, Communicator&)>& body,
                                           std::vector<uint64_t>* bytes_sent = nullptr) {
  CommOptions opts;
  opts.timeout_s = 30;
  auto comms = make_thread_communicators(N, opts);
  std::vector<Watcher> watchers(static_cast<size_t>(N));
  std::vector<std::string> errors(static_cast<size_t>(N));
  std::vector<std::thread> ts;
  for (int r = 0; r < N; ++r) {
    dynamic_cast<RingCommunicator&>(*comms[r]).set_observer(&watchers[r]);
    ts.emplace_back([&, r] {
      try {
        body(r, *comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errors) RZ_CHECK(e.empty(), "%s", e.c_str());
  if (bytes_sent != nullptr)
    for (int r = 0; r < N; ++r) bytes_sent->push_back(comms[r]->stats().total().bytes_sent);
  std::vector<std::vector<Seen>> out;
  for (auto& w : watchers) out.push_back(std::move(w.seen));
  return out;
}

const Seen& find(const std::vector<Seen>& seen, CollectiveKind phase, int round, bool end) {
  for (const Seen& s : seen)
    if (s.phase == phase && s.round == round && s.end == end) return s;
  RZ_FAIL("ring example: no %s round %d was observed", collective_name(phase), round);
}

// "[1, 2 | 3, 4]": a buffer of N chunks; NaN (not yet received) prints as ".".
std::string show(const std::vector<float>& v, int N) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) {
      bool boundary = false;
      for (int c = 1; c < N; ++c) boundary |= shard_of(v.size(), N, c).offset == i;
      s += boundary ? " | " : ", ";
    }
    s += v[i] != v[i] ? std::string(".") : strfmt("%g", v[i]);
  }
  return s + "]";
}

std::string show_values(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + strfmt("%g", v[i]);
  return s + "]";
}

// Replays one rank's rounds of `phase` over its buffer and prints a table row per round.
void replay(FILE* out, const std::vector<std::vector<Seen>>& seen, CollectiveKind phase,
            std::vector<std::vector<float>>& view, size_t count) {
  const int N = static_cast<int>(seen.size());
  const char* verb = phase == CollectiveKind::reduce_scatter ? "adds it to its own" : "stores it";
  for (int k = 1; k <= N - 1; ++k) {
    std::fprintf(out, "  round %d (%s):\n", k, collective_name(phase));
    for (int r = 0; r < N; ++r) {
      const Seen& b = find(seen[r], phase, k, false);
      const Seen& e = find(seen[r], phase, k, true);
      const ShardRange rc = shard_of(count, N, e.recv_chunk);
      for (size_t i = 0; i < e.values.size(); ++i) view[r][rc.offset + i] = e.values[i];
      std::fprintf(out, "    rank %d sends chunk %d %s -> rank %d; receives chunk %d from rank %d and %s: %s\n", r,
                   b.sent_chunk, show_values(b.values).c_str(), (r + 1) % N, e.recv_chunk, (r - 1 + N) % N, verb,
                   show(view[r], N).c_str());
    }
  }
}

std::string letter(int rank) { return std::string(1, char('a' + rank)); }

// Chunk c's partial sum from its contributor bit set, in ring order starting at rank c+1.
std::string terms(uint32_t mask, int chunk, int N) {
  std::string s;
  for (int k = 1; k <= N; ++k) {
    const int q = (chunk + k) % N;
    if (!(mask & (1u << q))) continue;
    if (!s.empty()) s += '+';
    s += strfmt("%c%d", char('a' + q), chunk);
  }
  return s;
}

}  // namespace

const char* chunk_ownership_note() {
  return "Note: ringzero's ReduceScatter leaves the reduced chunk r on rank r. The article's 4-rank table\n"
         "leaves chunk r+1 on rank r (GPU 0 ends with chunk 1, GPU 3 with chunk 0): there chunk c sets\n"
         "out from rank c and, N-1 hops later, stops on rank c-1. ringzero runs the same ring shifted by\n"
         "one -- in round k rank r sends chunk r-k instead of r-k+1 -- so chunk c sets out from rank c+1\n"
         "and stops on rank c. Why: ReduceScatter's definition (the article's own two-rank example, NCCL,\n"
         "PyTorch) gives rank r the r-th shard; under ZeRO rank r then updates exactly the parameters of\n"
         "shard r, and the AllGather that follows starts from rank r holding chunk r. The volume and the\n"
         "number of rounds are the same either way.\n";
}

void print_article_example(FILE* out) {
  const int N = 2;
  const std::vector<std::vector<float>> data = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fprintf(out,
               "The article's example on the real ring: 2 ranks, rank 0 holds [1, 2, 3, 4], rank 1 holds\n"
               "[5, 6, 7, 8]. Chunks are separated by |; '.' is a place not received yet. With N = 2 every\n"
               "round is one send to the right neighbour and one receive from the left (both are the other rank).\n\n");

  // AllGather: each rank's four numbers are its shard of an 8-element result.
  {
    std::vector<std::vector<float>> result(N, std::vector<float>(8));
    std::vector<uint64_t> sent;
    auto seen = run_watched(
        N, [&](int r, Communicator& c) { c.all_gather(data[r].data(), result[r].data(), 8, DType::f32); }, &sent);
    std::vector<std::vector<float>> view(N, std::vector<float>(8, nan));
    for (int r = 0; r < N; ++r)
      for (int i = 0; i < 4; ++i) view[r][shard_of(8, N, r).offset + i] = data[r][i];
    std::fprintf(out, "== AllGather: collect, no arithmetic ==\n  start: rank 0 %s, rank 1 %s\n",
                 show(view[0], N).c_str(), show(view[1], N).c_str());
    replay(out, seen, CollectiveKind::all_gather, view, 8);
    for (int r = 0; r < N; ++r) {
      RZ_CHECK(view[r] == result[r], "ring example: replayed AllGather differs on rank %d", r);
      RZ_CHECK(result[r] == std::vector<float>({1, 2, 3, 4, 5, 6, 7, 8}), "ring example: AllGather gave %s on rank %d",
               show_values(result[r]).c_str(), r);
    }
    std::fprintf(out, "  result: both ranks hold %s, as in the article.\n  bytes sent: rank 0 %llu, rank 1 %llu "
                      "((N-1)/N of the 32-byte result)\n\n", show_values(result[0]).c_str(),
                 static_cast<unsigned long long>(sent[0]), static_cast<unsigned long long>(sent[1]));
  }
  // ReduceScatter: the sum [6, 8, 10, 12], rank r keeps chunk r.
  {
    std::vector<std::vector<float>> shard(N, std::vector<float>(2));
    std::vector<uint64_t> sent;
    auto seen = run_watched(
        N, [&](int r, Communicator& c) { c.reduce_scatter(data[r].data(), shard[r].data(), 4, DType::f32, ReduceOp::sum); },
        &sent);
    std::vector<std::vector<float>> view = data;
    std::fprintf(out, "== ReduceScatter: sum, then each rank keeps one chunk ==\n  start: rank 0 %s, rank 1 %s\n",
                 show(view[0], N).c_str(), show(view[1], N).c_str());
    replay(out, seen, CollectiveKind::reduce_scatter, view, 4);
    RZ_CHECK(shard[0] == std::vector<float>({6, 8}) && shard[1] == std::vector<float>({10, 12}),
             "ring example: ReduceScatter gave %s and %s", show_values(shard[0]).c_str(), show_values(shard[1]).c_str());
    std::fprintf(out, "  result: rank 0 keeps chunk 0 %s, rank 1 keeps chunk 1 %s: the front and back halves of\n"
                      "  [6, 8, 10, 12], as in the article. (The other chunk of each buffer is the rank's own\n"
                      "  input, sent in round 1 and never needed again.) bytes sent: rank 0 %llu, rank 1 %llu\n\n",
                 show_values(shard[0]).c_str(), show_values(shard[1]).c_str(),
                 static_cast<unsigned long long>(sent[0]), static_cast<unsigned long long>(sent[1]));
  }
  // AllReduce = ReduceScatter then AllGather, in place.
  {
    std::vector<std::vector<float>> buf = data;
    std::vector<uint64_t> sent;
    auto seen = run_watched(
        N, [&](int r, Communicator& c) { c.all_reduce(buf[r].data(), 4, DType::f32, ReduceOp::sum); }, &sent);
    std::vector<std::vector<float>> view = data;
    std::fprintf(out, "== AllReduce = ReduceScatter + AllGather ==\n  start: rank 0 %s, rank 1 %s\n",
                 show(view[0], N).c_str(), show(view[1], N).c_str());
    replay(out, seen, CollectiveKind::reduce_scatter, view, 4);
    replay(out, seen, CollectiveKind::all_gather, view, 4);
    for (int r = 0; r < N; ++r) {
      RZ_CHECK(view[r] == buf[r], "ring example: replayed AllReduce differs on rank %d", r);
      RZ_CHECK(buf[r] == std::vector<float>({6, 8, 10, 12}), "ring example: AllReduce gave %s on rank %d",
               show_values(buf[r]).c_str(), r);
    }
    std::fprintf(out, "  result: both ranks hold %s, as in the article. bytes sent: rank 0 %llu, rank 1 %llu\n"
                      "  (one chunk per phase: 2(N-1)/N of the 16-byte tensor)\n\n", show_values(buf[0]).c_str(),
                 static_cast<unsigned long long>(sent[0]), static_cast<unsigned long long>(sent[1]));
  }
  std::fputs(chunk_ownership_note(), out);
}

void print_chunk_path(FILE* out, const std::string& op, int N, int chunk) {
  RZ_CHECK(chunk >= 0 && chunk < N, "--follow-chunk: expected a chunk index 0..%d for %d ranks, found %d", N - 1, N,
           chunk);
  RZ_CHECK(N <= 24, "--follow-chunk: at most 24 ranks (partial sums are bit sets in fp32), found %d", N);
  const size_t count = static_cast<size_t>(N);  // one element per chunk: rank r's element is 2^r
  auto seen = run_watched(N, [&](int r, Communicator& c) {
    std::vector<float> buf(count, float(1u << r)), shard(1, float(1u << r));
    if (op == "all_gather") c.all_gather(shard.data(), buf.data(), count, DType::f32);
    else if (op == "reduce_scatter") c.reduce_scatter(buf.data(), shard.data(), count, DType::f32, ReduceOp::sum);
    else c.all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
  });
  auto mask = [](const Seen& s) { return s.values.empty() ? 0u : static_cast<uint32_t>(s.values[0]); };
  std::fprintf(out, "Chunk %d on a ring of %d ranks (%s). Rank 0's part of chunk %d is a%d, rank 1's b%d, and so on;\n"
                    "every hop goes from rank r to rank r+1.\n\n",
               chunk, N, op.c_str(), chunk, chunk, chunk);
  int holders = 1;
  for (CollectiveKind phase : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    if (phase == CollectiveKind::reduce_scatter && op == "all_gather") continue;
    if (phase == CollectiveKind::all_gather && op == "reduce_scatter") continue;
    const bool rs = phase == CollectiveKind::reduce_scatter;
    if (op == "all_reduce")
      std::fprintf(out, rs ? "Phase 1, ReduceScatter: the chunk gathers one term per hop.\n"
                           : "Phase 2, AllGather: the finished chunk S%d is passed on unchanged.\n", chunk);
    for (int k = 1; k <= N - 1; ++k) {
      for (int r = 0; r < N; ++r) {
        const Seen& b = find(seen[r], phase, k, false);
        if (b.sent_chunk != chunk) continue;
        const int to = (r + 1) % N;
        const Seen& e = find(seen[to], phase, k, true);
        RZ_CHECK(e.recv_chunk == chunk, "ring example: rank %d received chunk %d in round %d, expected %d", to,
                 e.recv_chunk, k, chunk);
        if (rs) {
          std::fprintf(out, "  round %d: rank %d sends %s -> rank %d, which adds %s%d: %s%s\n", k, r,
                       terms(mask(b), chunk, N).c_str(), to, letter(to).c_str(), chunk,
                       terms(mask(e), chunk, N).c_str(), k == N - 1 ? strfmt("  (finished, on rank %d)", to).c_str() : "");
        } else {
          ++holders;
          const std::string name = op == "all_gather" ? strfmt("%c", char('A' + chunk)) : strfmt("S%d", chunk);
          std::fprintf(out, "  round %d: rank %d forwards %s -> rank %d  (%d of %d ranks hold it)\n", k, r,
                       name.c_str(), to, holders, N);
        }
      }
    }
    std::fprintf(out, "\n");
  }
  if (op != "all_gather") std::fputs(chunk_ownership_note(), out);
}

}  // namespace rz
