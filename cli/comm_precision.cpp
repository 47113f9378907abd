// cli/comm_precision.cpp: comm-bench --check-precision (see comm_precision.h).
#include "cli/comm_precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/bf16.h"
#include "base/check.h"
#include "comm/factory.h"
#include "data/loader.h"
#include "model/gpt2.h"
#include "model/grad_sink.h"
#include "model/llmc_file.h"
#include "train/config.h"

namespace rz {

namespace {

// ||got - ref|| / ||ref|| over n elements.
double rel_l2(const std::vector<double>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

// Runs fn(rank, comm) on N thread ranks of the real ring; rethrows the first rank's error.
void on_thread_ranks(int N, size_t segment_bytes, const std::function<void(int, Communicator&)>& fn) {
  CommOptions o;
  o.segment_bytes = segment_bytes;
  o.flight_entries = 0;  // nothing to diagnose here
  auto comms = make_thread_communicators(N, o);
  std::vector<std::string> errors(static_cast<size_t>(N));
  std::vector<std::thread> ts;
  for (int r = 0; r < N; ++r)
    ts.emplace_back([&, r] {
      try {
        fn(r, *comms[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (const auto& e : errors) RZ_CHECK(e.empty(), "check-precision: %s", e.c_str());
}

// One ring reduction of every rank's gradients (bf16 in, or widened to fp32) with avg; the
// full result as floats (ReduceScatter: the ranks' shards put together).
std::vector<float> reduce(const std::vector<std::vector<bf16>>& grads, int N, bool fp32, bool all_reduce,
                          size_t segment_bytes) {
  const size_t count = grads[0].size();
  std::vector<float> result(count);
  on_thread_ranks(N, segment_bytes, [&](int r, Communicator& c) {
    const std::vector<bf16>& g = grads[static_cast<size_t>(r)];
    const ShardRange mine = shard_of(count, N, r);
    if (fp32) {
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = bf16_to_float(g[i]);
      if (all_reduce) c.all_reduce(buf.data(), count, DType::f32, ReduceOp::avg);
      else c.reduce_scatter(buf.data(), buf.data() + mine.offset, count, DType::f32, ReduceOp::avg);
      // Each rank writes only its own shard of the shared result.
      std::copy(buf.begin() + static_cast<long>(mine.offset), buf.begin() + static_cast<long>(mine.offset + mine.count),
                result.begin() + static_cast<long>(mine.offset));
    } else {
      std::vector<bf16> buf = g;
      if (all_reduce) c.all_reduce(buf.data(), count, DType::bf16, ReduceOp::avg);
      else c.reduce_scatter(buf.data(), buf.data() + mine.offset, count, DType::bf16, ReduceOp::avg);
      for (size_t i = mine.offset; i < mine.offset + mine.count; ++i) result[i] = bf16_to_float(buf[i]);
    }
  });
  return result;
}

}  // namespace

std::vector<PrecisionRow> check_reduction_precision(const PrecisionCheckArgs& a, FILE* log, std::string* about) {
  RZ_CHECK(!a.nranks.empty(), "--ranks: give at least one rank count");
  for (int n : a.nranks) RZ_CHECK(n >= 2 && n <= 256, "--ranks: expected rank counts in 2..256, found %d", n);
  TrainConfig tc;
  load_config_toml(tc, a.config);
  if (!a.data.empty()) tc.data = a.data;
  RZ_CHECK(!tc.data.empty(), "check-precision: %s names no training data (give --data)", a.config.c_str());
  GPT2Config mc = config_model_shape(tc);
  const ModelSource init = parse_model_source(a.init);
  if (!init.empty()) mc = read_model_source_config(init);
  finalize_config(mc);
  const int max_n = *std::max_element(a.nranks.begin(), a.nranks.end());

  // N_max backward passes of the bf16 model, one batch of rank r's data each.
  GPT2 model(mc, ModelOptions{Precision::bf16, Recompute::none});
  if (!a.init.empty())
    read_model_source(init, [&](size_t begin, const float* p, size_t n) { model.set_params_f32(begin, n, p); });
  else model.init_random(tc.seed);
  const size_t P = model.layout().total;
  if (about != nullptr)
    *about = strfmt("Model L%d C%d NH%d V%d (%s): %zu gradients per rank, one backward of B=%d x T=%d each on %s, "
                    "%s.",
                    mc.num_layers, mc.channels, mc.num_heads, mc.vocab_size, a.config.c_str(), P, tc.batch, tc.seq,
                    tc.data.c_str(), a.init.empty() ? strfmt("random init (seed %llu)", (unsigned long long)tc.seed).c_str()
                                                    : ("weights of " + a.init).c_str());
  FullGradSink sink(P, Precision::bf16);
  std::vector<std::vector<bf16>> grads(static_cast<size_t>(max_n), std::vector<bf16>(P));
  std::vector<int> inputs(static_cast<size_t>(tc.batch) * tc.seq), targets(inputs.size());
  for (int r = 0; r < max_n; ++r) {
    DataLoader loader(tc.data, tc.batch, tc.seq, r, max_n, tc.seed, true);
    loader.set_vocab_bound(mc.vocab_size);
    loader.next_batch(inputs.data(), targets.data());
    sink.zero();
    model.forward(inputs.data(), targets.data(), tc.batch, tc.seq);
    model.backward(sink);
    std::memcpy(grads[static_cast<size_t>(r)].data(), sink.data(), P * sizeof(bf16));
    if (log != nullptr && (r + 1) % 16 == 0) std::fprintf(log, "check-precision: %d of %d backward passes\n", r + 1, max_n);
  }

  std::vector<PrecisionRow> rows;
  for (int N : a.nranks) {
    // The reference: the fp64 mean of the very bf16 values the ranks reduce.
    std::vector<double> mean(P, 0.0);
    for (int r = 0; r < N; ++r)
      for (size_t i = 0; i < P; ++i) mean[i] += static_cast<double>(bf16_to_float(grads[static_cast<size_t>(r)][i]));
    for (double& m : mean) m /= N;
    PrecisionRow row;
    row.nranks = N;
    row.count = P;
    row.rs_bf16 = rel_l2(mean, reduce(grads, N, false, false, a.segment_bytes));
    row.ar_bf16 = rel_l2(mean, reduce(grads, N, false, true, a.segment_bytes));
    row.rs_fp32 = rel_l2(mean, reduce(grads, N, true, false, a.segment_bytes));
    std::vector<float> ar = reduce(grads, N, true, true, a.segment_bytes);
    row.ar_fp32 = rel_l2(mean, ar);
    for (float& x : ar) x = bf16_to_float(float_to_bf16(x));
    row.fp32_to_bf16 = rel_l2(mean, ar);
    rows.push_back(row);
    if (log != nullptr) std::fprintf(log, "check-precision: N = %d done\n", N);
  }
  return rows;
}

void print_precision_rows(const std::vector<PrecisionRow>& rows, const std::string& about, bool json, FILE* out) {
  if (json) {
    for (const PrecisionRow& r : rows) {
      nlohmann::json j = {{"check", "precision"}, {"nranks", r.nranks},   {"count", r.count},
                          {"rs_bf16", r.rs_bf16}, {"ar_bf16", r.ar_bf16}, {"rs_fp32", r.rs_fp32},
                          {"ar_fp32", r.ar_fp32}, {"fp32_to_bf16", r.fp32_to_bf16}};
      if (!about.empty()) j["about"] = about;
      std::fprintf(out, "%s\n", j.dump().c_str());
    }
    return;
  }
  std::fprintf(out, "# ringzero comm-bench --check-precision: ring reduction (avg) of real bf16 gradients,\n");
  std::fprintf(out, "# relative L2 error against the fp64 mean of the same inputs. %s\n", about.c_str());
  std::fprintf(out, "# fp32->bf16: the fp32 AllReduce rounded to bf16 once (what --grad-reduce-dtype fp32 keeps in a\n");
  std::fprintf(out, "# bf16 run); x one rounding: RS bf16 / fp32->bf16.\n");
  std::fprintf(out, "#%5s %12s %12s %12s %12s %12s %14s\n", "N", "RS bf16", "AR bf16", "RS fp32", "AR fp32", "fp32->bf16",
               "x one rounding");
  for (const PrecisionRow& r : rows)
    std::fprintf(out, " %5d %12.3e %12.3e %12.3e %12.3e %12.3e %14.2f\n", r.nranks, r.rs_bf16, r.ar_bf16, r.rs_fp32,
                 r.ar_fp32, r.fp32_to_bf16, r.fp32_to_bf16 > 0 ? r.rs_bf16 / r.fp32_to_bf16 : 0.0);
}

}  // namespace rz
