// cli/comm_precision.h: `ringzero comm-bench --check-precision`: what a bf16 gradient
// reduction loses on the ring, against fp32, as N grows.
//
// Why: the ring's ReduceScatter rounds each chunk's partial sum to the dtype it travels in
// after every one of its N-1 hops (comm/ring/ring.cpp), so the error of a bf16 reduction grows
// with N; fp32 partials round at fp32's precision and cost twice the bytes
// (--grad-reduce-dtype, zero/wide_reduce.h). This measures it on gradients from a real
// backward of a training config's model (configs/tiny.toml by default), not on noise:
//   - one bf16 model (the run's shape, seed or --init checkpoint) takes one backward per
//     rank, N_max of them, each on its own batch of the config's data (rank r's loader);
//   - for every N: ranks 0..N-1 (threads, the real ring) reduce their bf16 gradients with
//     avg, as training does, by ReduceScatter and by AllReduce, once in bf16 and once
//     widened exactly to fp32; the fp32 result is also rounded to bf16 once (what a bf16
//     run with --grad-reduce-dtype fp32 keeps);
//   - each result is compared with the fp64 mean of the same bf16 inputs: the relative L2
//     error ||result - mean|| / ||mean|| over every gradient element.
// The inputs are exactly what they are in a bf16 run, so the table shows the reduction's
// error alone. Printed as a table, or one JSON line per N for `ringzero plot precision`.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace rz {

struct PrecisionCheckArgs {
  std::string config = "configs/tiny.toml";  // model shape, data, batch, seq and seed come from it
  std::string data;                          // overrides the config's training shards
  std::string init;                          // llm.c model file to take the gradients at (default: random init)
  std::vector<int> nranks = {2, 4, 8, 16, 32, 64};
  size_t segment_bytes = 64 * 1024;          // the ring's segment (64 thread ranks share the host)
  bool json = false;
};

struct PrecisionRow {
  int nranks = 0;
  size_t count = 0;        // gradient elements reduced
  double rs_bf16 = 0;      // ReduceScatter in bf16
  double ar_bf16 = 0;      // AllReduce in bf16
  double rs_fp32 = 0;      // ReduceScatter in fp32
  double ar_fp32 = 0;      // AllReduce in fp32
  double fp32_to_bf16 = 0;  // the fp32 AllReduce rounded to bf16 once
};

// Runs the check; progress notes go to `log` (null: none); *about gets one line naming the
// model, the data and the batch. Throws on bad input.
std::vector<PrecisionRow> check_reduction_precision(const PrecisionCheckArgs& a, FILE* log, std::string* about);

// The table (with a header naming the model and data) or the JSON lines.
void print_precision_rows(const std::vector<PrecisionRow>& rows, const std::string& about, bool json, FILE* out);

}  // namespace rz
