// zero/memory/report.h: what each rank really holds, next to the formula for its strategy.
//
// Every sizeable buffer is a rz::Buffer with a MemTag, so the process-wide MemoryTracker
// knows current and peak bytes per tag. At the end of the first step the trainer calls
// gather_memory_report(): each rank's 20 counters (current and peak per tag, peak total, the driver's figure)
// travel to every rank with one AllGather (uint64 words moved as pairs of fp32 words:
// AllGather copies bytes, it does no arithmetic), and rank 0 prints them side by side
// with the exact bytes ringzero's allocation rules give for the strategy
// (zero/memory/formula.h) and writes them as JSON.
//
// With the thread transport all ranks share one process and one tracker: each column then
// shows the sum over ranks, and the report says so.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/memory.h"
#include "comm/communicator.h"
#include "model/gpt2.h"
#include "zero/memory/formula.h"
#include "zero/strategy.h"

namespace rz {

// One rank's tracker figures for the device its model lives on (the host, or a GPU), and
// on a GPU the driver's figure (cudaMemGetInfo, every allocation of every process on that
// device: the CUDA context, cuBLASLt's workspace, other ranks sharing the GPU) and the
// host bytes the rank holds beside it.
struct RankMemoryCounters {
  uint64_t current[kNumMemTags] = {};
  uint64_t peak[kNumMemTags] = {};
  uint64_t peak_total = 0;
  uint64_t driver_used = 0;      // 0 and 0 on the host
  uint64_t driver_total = 0;
  uint64_t host_peak_total = 0;  // equal to peak_total on the host
};

struct MemoryReport {
  StrategyKind kind = StrategyKind::ddp;
  Precision precision = Precision::fp32;
  int nranks = 1;
  std::string transport;
  Device device;  // where the counted bytes live
  size_t num_params = 0;
  size_t num_buckets = 0;
  int pool_size = 0;           // zero2: general staging buffers (plus one reserved for wte's bucket)
  size_t wte_bucket_bytes = 0;  // zero2: the reserved staging buffer
  int wide_buffers = 0;        // --grad-reduce-dtype fp32: fp32 reduce buffers (expected.wide bytes)
  PerParamBytes formula;       // ringzero's bytes/param
  PerParamBytes paper;         // the ZeRO paper's bytes/param
  ExactStateBytes expected;    // per rank, padding included
  Recompute recompute = Recompute::none;
  size_t activations = 0;      // GPT2::activation_bytes for the largest (B, T) run, per rank
  std::vector<RankMemoryCounters> ranks;
};

RankMemoryCounters local_rank_memory(Backend& backend);

// Collective: every rank must call it. Every rank gets the full report. The expected
// bytes come from what `strategy` built (its bucket plan and staging pool).
MemoryReport gather_memory_report(Communicator& comm, GPT2& model, const Strategy& strategy);

void print_memory_report(const MemoryReport& report, FILE* out);
nlohmann::json memory_report_json(const MemoryReport& report);

}  // namespace rz
