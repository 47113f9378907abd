#include "train/progress.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace rz {
namespace {

constexpr size_t kWords = 2 * kNumMemTags + 2;  // current[tags], peak[tags], current_total, peak_total

void split(size_t bytes, float* out) {
  out[0] = static_cast<float>(bytes >> 24);
  out[1] = static_cast<float>(bytes & ((1u << 24) - 1));
}
size_t join(const float* in) { return (static_cast<size_t>(in[0]) << 24) + static_cast<size_t>(in[1]); }

}  // namespace

std::vector<RankMemory> gather_rank_memory(Communicator& comm) {
  const MemoryTracker& mt = MemoryTracker::global();
  const int N = comm.size();
  std::vector<float> mine(2 * kWords);
  for (int t = 0; t < kNumMemTags; ++t) {
    split(mt.current(static_cast<MemTag>(t)), &mine[2 * t]);
    split(mt.peak(static_cast<MemTag>(t)), &mine[2 * (kNumMemTags + t)]);
  }
  split(mt.current_total(), &mine[4 * kNumMemTags]);
  split(mt.peak_total(), &mine[4 * kNumMemTags + 2]);
  // The AllGather concatenates equal shards: each rank's block is exactly 2*kWords floats.
  std::vector<float> all(2 * kWords * static_cast<size_t>(N));
  comm.all_gather(mine.data(), all.data(), all.size(), DType::f32);
  std::vector<RankMemory> out(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) {
    const float* b = all.data() + 2 * kWords * static_cast<size_t>(r);
    for (int t = 0; t < kNumMemTags; ++t) {
      out[r].current[t] = join(b + 2 * t);
      out[r].peak[t] = join(b + 2 * (kNumMemTags + t));
    }
    out[r].current_total = join(b + 4 * kNumMemTags);
    out[r].peak_total = join(b + 4 * kNumMemTags + 2);
  }
  return out;
}

std::vector<float> gather_peak_mib(Communicator& comm) {
  std::vector<float> all(static_cast<size_t>(comm.size()));
  const float mine = static_cast<float>(MemoryTracker::global().peak_total()) / (1024.0f * 1024.0f);
  comm.all_gather(&mine, all.data(), all.size(), DType::f32);
  return all;
}

std::string format_memory_table(const std::vector<RankMemory>& ranks, const std::string& title,
                                const std::vector<size_t>& expected) {
  std::string out = title + "\n";
  out += strfmt("%-12s", "tag");
  for (size_t r = 0; r < ranks.size(); ++r) out += strfmt(" %14s %14s", strfmt("r%zu now", r).c_str(), strfmt("r%zu peak", r).c_str());
  if (!expected.empty()) out += strfmt(" %14s", "formula");
  out += "\n";
  for (int t = 0; t <= kNumMemTags; ++t) {
    const bool total = t == kNumMemTags;
    out += strfmt("%-12s", total ? "total" : mem_tag_name(static_cast<MemTag>(t)));
    for (const auto& r : ranks)
      out += strfmt(" %14s %14s", format_bytes(static_cast<double>(total ? r.current_total : r.current[t])).c_str(),
                    format_bytes(static_cast<double>(total ? r.peak_total : r.peak[t])).c_str());
    if (!expected.empty()) {
      const bool known = !total && static_cast<size_t>(t) < expected.size() && expected[t] != SIZE_MAX;
      out += strfmt(" %14s", known ? format_bytes(static_cast<double>(expected[t])).c_str() : "-");
    }
    out += "\n";
  }
  return out;
}

std::string memory_report_json(const std::vector<RankMemory>& ranks, const std::string& strategy,
                               const std::string& precision, const std::vector<size_t>& expected) {
  nlohmann::json j;
  j["strategy"] = strategy;
  j["precision"] = precision;
  j["nranks"] = ranks.size();
  nlohmann::json rs = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    nlohmann::json cur, peak;
    for (int t = 0; t < kNumMemTags; ++t) {
      cur[mem_tag_name(static_cast<MemTag>(t))] = ranks[r].current[t];
      peak[mem_tag_name(static_cast<MemTag>(t))] = ranks[r].peak[t];
    }
    cur["total"] = ranks[r].current_total;
    peak["total"] = ranks[r].peak_total;
    rs.push_back({{"rank", r}, {"current_bytes", cur}, {"peak_bytes", peak}});
  }
  j["ranks"] = rs;
  nlohmann::json ex = nlohmann::json::object();
  for (size_t t = 0; t < expected.size() && t < static_cast<size_t>(kNumMemTags); ++t)
    if (expected[t] != SIZE_MAX) ex[mem_tag_name(static_cast<MemTag>(t))] = expected[t];
  j["formula_bytes_per_rank"] = ex;
  return j.dump(2) + "\n";
}

}  // namespace rz
