// train/progress.h: what the ranks tell rank 0 about their memory, and how it is shown.
//
// Byte counts travel through the fp32 collectives as two floats each (high and low 24
// bits), which is exact up to 2^48 bytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/memory.h"
#include "comm/communicator.h"

namespace rz {

struct RankMemory {
  size_t current[kNumMemTags] = {};
  size_t peak[kNumMemTags] = {};
  size_t current_total = 0;
  size_t peak_total = 0;
};

// Collective: every rank passes its own tracker's numbers; returns all ranks' (index = rank).
std::vector<RankMemory> gather_rank_memory(Communicator& comm);
// Collective: every rank's peak_total in MiB (for the progress line).
std::vector<float> gather_peak_mib(Communicator& comm);

// Rows: tags and total; columns: each rank's current and peak bytes; a last column with the
// expected bytes per rank from the strategy's formula when `expected` is non-empty (per tag).
std::string format_memory_table(const std::vector<RankMemory>& ranks, const std::string& title,
                                const std::vector<size_t>& expected);
std::string memory_report_json(const std::vector<RankMemory>& ranks, const std::string& strategy,
                               const std::string& precision, const std::vector<size_t>& expected);

}  // namespace rz
