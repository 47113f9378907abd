// cli/cmd_comm_trace.cpp: `ringzero comm-trace`, the ring's round tables, live (in the
// layout of the seed article's tables, docs/comm.md).
//
// Runs the real ring (comm/ring/ring.cpp) on N thread ranks with one element per chunk and
// watches every round through a RingObserver. The data itself is symbolic: rank r's
// element is 2^r, so any partial sum is a bit set of the ranks that contributed (exact in
// fp32 up to 24 ranks), and reading the buffer after a round tells exactly whose terms it
// holds. The tables below are therefore what the ring did, not what it should do.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "comm/factory.h"
#include "comm/ring/ring.h"
#include "comm/ring_communicator.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "viz/ring_example.h"

namespace rz {
namespace {

struct Event {
  CollectiveKind phase;
  int round;
  int sent_chunk, recv_chunk;
  uint32_t sent_mask, held_mask;  // contributors of the chunk sent / held after the round
};

class Recorder final : public RingObserver {
 public:
  std::vector<Event> events;
  void on_round(const RingRound& r) override {
    uint32_t mask = r.data_count > 0 ? static_cast<uint32_t>(static_cast<const float*>(r.data)[0]) : 0;
    if (!r.end) {
      events.push_back(Event{r.phase, r.round, r.sent_chunk, r.recv_chunk, mask, 0});
    } else {
      events.back().held_mask = mask;
    }
  }
};

std::string letter(int rank, bool upper) { return std::string(1, char((upper ? 'A' : 'a') + rank)); }

// Chunk c's partial sum, terms in the order the ring added them (starting on rank c+1).
std::string partial_sum(uint32_t mask, int chunk, int N, bool finished_as_sigma) {
  if (finished_as_sigma && mask == (1u << N) - 1) return "S" + std::to_string(chunk);
  std::string s;
  for (int k = 1; k <= N; ++k) {
    int q = (chunk + k) % N;
    if (mask & (1u << q)) s += (s.empty() ? "" : "+") + letter(q, false) + std::to_string(chunk);
  }
  return s;
}

void print_row(const std::vector<std::string>& cells, const std::vector<size_t>& w) {
  std::printf("|");
  for (size_t i = 0; i < cells.size(); ++i) std::printf(" %-*s |", int(w[i]), cells[i].c_str());
  std::printf("\n");
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(rows[0].size(), 0);
  for (auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  print_row(rows[0], w);
  std::printf("|");
  for (size_t x : w) std::printf("%s|", std::string(x + 2, '-').c_str());
  std::printf("\n");
  for (size_t i = 1; i < rows.size(); ++i) print_row(rows[i], w);
  std::printf("\n");
}

// Runs the ring on N thread ranks, one element per chunk, and records every rank's rounds.
std::vector<Recorder> record_ring(const std::string& op, int N) {
  CommOptions opts;
  opts.timeout_s = 30;
  auto comms = make_thread_communicators(N, opts);
  std::vector<Recorder> rec(N);
  std::vector<std::string> errors(N);
  std::vector<std::thread> ts;
  for (int r = 0; r < N; ++r) {
    dynamic_cast<RingCommunicator&>(*comms[r]).set_observer(&rec[r]);
    ts.emplace_back([&, r] {
      try {
        const size_t count = N;  // one element per chunk
        std::vector<float> buf(count, 0.0f), shard(1, float(1u << r));
        if (op == "all_gather") {
          comms[r]->all_gather(shard.data(), buf.data(), count, DType::f32);
        } else {
          for (auto& x : buf) x = float(1u << r);
          if (op == "all_reduce") comms[r]->all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
          else comms[r]->reduce_scatter(buf.data(), shard.data(), count, DType::f32, ReduceOp::sum);
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errors) RZ_CHECK(e.empty(), "%s", e.c_str());
  return rec;
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// What the tables show: the ring's rule and who starts with what.
void print_intro(const std::string& op, int N) {
  const bool gather_only = op == "all_gather";
  std::printf("%s on a ring of %d ranks: rank r sends only to rank r+1 and receives only from rank r-1.\n",
              op.c_str(), N);
  if (gather_only) {
    std::printf("Rank r starts with one chunk (");
    for (int r = 0; r < N; ++r) std::printf("%s%s", r ? ", " : "", letter(r, true).c_str());
    std::printf(") and must end with all of them.\n\n");
  } else {
    std::printf("Each rank's tensor is cut into %d chunks: rank 0 holds a0..a%d, rank 1 b0..b%d, and so on.\n"
                "ReduceScatter ends with rank r holding chunk r summed over all ranks (its shard).\n\n",
                N, N - 1, N - 1);
  }
}

// One table per round and phase: what each rank sent, received and holds after it.
void print_rounds(const std::string& op, int N, const std::vector<Recorder>& rec) {
  const bool gather_only = op == "all_gather";
  // Holdings for the AllGather tables, in arrival order.
  std::vector<std::vector<int>> held(N);
  for (int r = 0; r < N; ++r) held[r].push_back(r);
  for (CollectiveKind phase : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    if (phase == CollectiveKind::reduce_scatter && gather_only) continue;
    if (phase == CollectiveKind::all_gather && op == "reduce_scatter") continue;
    const bool rs = phase == CollectiveKind::reduce_scatter;
    if (op == "all_reduce" && rs)
      std::printf("== Phase 1: ReduceScatter -- pass the partial sum on, add your own term ==\n\n");
    if (op == "all_reduce" && !rs)
      std::printf("== Phase 2: AllGather -- pass the finished chunks on ==\n"
                  "S<c> is chunk c summed over all ranks; rank r starts this phase holding S<r>.\n\n");
    for (int k = 1; k <= N - 1; ++k) {
      std::printf("Round %d\n", k);
      std::vector<std::vector<std::string>> rows{{"rank", "sends", "receives", "holds after the round"}};
      for (int r = 0; r < N; ++r) {
        const Event* ev = nullptr;
        for (auto& e : rec[r].events)
          if (e.phase == phase && e.round == k) ev = &e;
        RZ_CHECK(ev != nullptr, "comm-trace: rank %d recorded no round %d", r, k);
        const int right = (r + 1) % N, left = (r - 1 + N) % N;
        std::string sent, got, holds;
        if (rs) {
          sent = partial_sum(ev->sent_mask, ev->sent_chunk, N, false);
          got = partial_sum(ev->held_mask & ~(1u << r), ev->recv_chunk, N, false);
          holds = partial_sum(ev->held_mask, ev->recv_chunk, N, false) + "  (chunk " + std::to_string(ev->recv_chunk) +
                  (k == N - 1 ? ", finished)" : ")");
        } else if (gather_only) {
          sent = letter(ev->sent_chunk, true);
          got = letter(ev->recv_chunk, true);
          held[r].push_back(ev->recv_chunk);
          std::vector<int> h = held[r];
          if (int(h.size()) == N) std::sort(h.begin(), h.end());
          for (size_t i = 0; i < h.size(); ++i) holds += (i ? ", " : "") + letter(h[i], true);
        } else {
          sent = partial_sum(ev->sent_mask, ev->sent_chunk, N, true);
          got = partial_sum(ev->held_mask, ev->recv_chunk, N, true);
          held[r].push_back(ev->recv_chunk);
          std::vector<int> h = held[r];
          if (int(h.size()) == N) std::sort(h.begin(), h.end());
          for (size_t i = 0; i < h.size(); ++i) holds += (i ? ", S" : "S") + std::to_string(h[i]);
        }
        rows.push_back({rank_name(r), sent + " -> " + rank_name(right), got + " <- " + rank_name(left), holds});
      }
      print_table(rows);
    }
  }
}

// The end state, and the volume each rank sent.
void print_summary(const std::string& op, int N, const std::vector<Recorder>& rec) {
  if (op == "reduce_scatter") {
    std::printf("After %d rounds each rank holds one chunk of the sum, its own shard:\n", N - 1);
  } else if (op == "all_gather") {
    std::printf("After %d rounds every rank holds all %d chunks. Each rank sent %d chunks: (N-1)/N of the data.\n",
                N - 1, N, N - 1);
  } else {
    std::printf("After 2 x %d rounds every rank holds S0..S%d. Each rank sent 2(N-1) = %d chunks: 2(N-1)/N x M.\n",
                N - 1, N - 1, 2 * (N - 1));
  }
  if (op == "reduce_scatter") {
    std::vector<std::vector<std::string>> rows{{"rank", "holds the finished chunk"}};
    for (int r = 0; r < N; ++r) {
      const Event& last = rec[r].events.back();
      rows.push_back({rank_name(r), partial_sum(last.held_mask, last.recv_chunk, N, false) + "  (chunk " +
                                        std::to_string(last.recv_chunk) + ")"});
    }
    print_table(rows);
  }
  if (op != "all_gather") std::printf("%s", chunk_ownership_note());
}

int run_comm_trace(int argc, char** argv) {
  std::string op = "all_reduce";
  int N = 4;
  int follow_chunk = -1;
  bool example = false;
  CLI::App app{
      "Print, round by round, what each rank of the ring sends to its right neighbour, receives from\n"
      "its left one and holds after the round (the layout of the seed article's tables; docs/comm.md).\n"
      "Runs the real ring code on N thread ranks; each rank's data is symbolic (rank r contributes\n"
      "a_r = 2^r), so partial sums read back as a0+b0...",
      "ringzero comm-trace"};
  app.add_option("--op", op, "all_gather, reduce_scatter or all_reduce")
      ->check(CLI::IsMember({"all_gather", "reduce_scatter", "all_reduce"}))->capture_default_str();
  add_number(app, "--nranks", N, "ranks on the ring (2..16)")->check(CLI::Range(2, 16))->capture_default_str();
  add_number(app, "--follow-chunk", follow_chunk, "print only chunk K's path around the ring, round by round");
  app.add_flag("--example", example,
               "the article's two ranks [1,2,3,4] and [5,6,7,8] through AllGather, ReduceScatter and AllReduce:\n"
               "every rank's buffer after every round");
  if (!parse_command_line(app, argc, argv)) return 0;
  if (example) {
    // The article's example is two ranks through all three collectives: nothing to choose.
    for (const char* flag : {"--op", "--nranks", "--follow-chunk"})
      RZ_CHECK(app.count(flag) == 0, "--example: cannot be combined with %s (the article's example is 2 ranks through "
               "all three collectives)", flag);
    print_article_example(stdout);
    return 0;
  }
  if (app.count("--follow-chunk") > 0) {
    print_chunk_path(stdout, op, N, follow_chunk);
    return 0;
  }
  const std::vector<Recorder> rec = record_ring(op, N);
  print_intro(op, N);
  print_rounds(op, N, rec);
  print_summary(op, N, rec);
  return 0;
}

const RegisterCommand kRegister{Command{"comm-trace", "print the ring's rounds as tables: who sends, receives and holds what",
                                        run_comm_trace, 61}};

}  // namespace
}  // namespace rz
