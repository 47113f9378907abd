// viz/timeline.cpp: the trace window of `train --trace` and the merged trace file.
#include "viz/timeline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file.h"
#include "base/trace.h"
#include "kernels/cpu/cpu_backend.h"
#include "zero/host_collectives.h"

namespace rz {

TraceSteps parse_trace_steps(const std::string& text, const char* key) {
  TraceSteps s;
  const size_t colon = text.find(':');
  auto parse = [&](const std::string& part, int& out) {
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    RZ_CHECK(!part.empty() && *end == 0 && v >= 1 && v <= (1L << 30),
             "%s: expected A:B with 1 <= A <= B (steps, 1-based), found '%s'", key, text.c_str());
    out = static_cast<int>(v);
  };
  parse(text.substr(0, colon), s.first);
  if (colon == std::string::npos) s.last = s.first;
  else parse(text.substr(colon + 1), s.last);
  RZ_CHECK(s.first <= s.last, "%s: expected A:B with A <= B, found '%s'", key, text.c_str());
  return s;
}

TraceWindow::TraceWindow(std::string path, TraceSteps steps, int last_step, std::string label,
                         trace::DeviceClock* device_clock, Backend* backend)
    : path_(std::move(path)), steps_(steps), label_(std::move(label)), backend_(backend), clock_(device_clock) {
  steps_.last = std::min(steps_.last, last_step);
}

TraceWindow::~TraceWindow() {
  if (clock_rank_ < 0) return;
  try {
    trace::set_device_clock(clock_rank_, nullptr);
  } catch (...) {  // a device error while resolving: nothing left to report it to
  }
}

void TraceWindow::begin_step(Communicator& comm, int step) {
  if (!active() || written_ || step < steps_.first || step > steps_.last) return;
  if (!open_) {
    comm.barrier();  // the clocks' common zero (timeline.h)
    trace::set_process_rank(comm.rank());
    if (clock_ != nullptr) {
      clock_rank_ = comm.rank();
      trace::set_device_clock(clock_rank_, clock_);
    }
    trace::start();  // sets the device clock's origin too: the device is idle from here
    open_ = true;
  }
  step_start_ = trace::stamp(comm.rank());
  counter_at_ = trace::stamp(comm.rank());
  step_start_stats_ = comm.stats();
}

void TraceWindow::end_step(Communicator& comm, int step, double overlap) {
  if (!open_ || written_) return;
  const trace::Stamp now = trace::stamp(comm.rank());
  const CommStats& st = comm.stats();
  std::string args = strfmt("\"overlap_pct\":%.2f", 100.0 * overlap);
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const uint64_t calls = st.by_kind[k].calls - step_start_stats_.by_kind[k].calls;
    window_stats_.by_kind[k].calls += calls;
    window_stats_.by_kind[k].bytes_sent += st.by_kind[k].bytes_sent - step_start_stats_.by_kind[k].bytes_sent;
    args += strfmt(",\"%s_calls\":%llu", collective_name(static_cast<CollectiveKind>(k)),
                   static_cast<unsigned long long>(calls));
  }
  trace::span(comm.rank(), trace::Track::compute, strfmt("step %d", step), step_start_, now, args);
  trace::counter(comm.rank(), "overlap %", counter_at_, 100.0 * overlap);
  trace::resolve();  // this step's device stamps, while they are few
  if (step >= steps_.last) write(comm);
}

void TraceWindow::finish(Communicator& comm) {
  if (open_ && !written_) write(comm);
  if (active() && !open_ && comm.rank() == 0)  // e.g. resumed after the window
    std::printf("trace: steps %d..%d did not run in this process; no trace written to %s\n", steps_.first,
                steps_.last, path_.c_str());
}

void TraceWindow::write(Communicator& comm) {
  trace::stop();
  written_ = true;
  if (clock_rank_ >= 0) {
    trace::set_device_clock(clock_rank_, nullptr);  // resolves what is left first
    clock_rank_ = -1;
  }
  const size_t bytes = write_merged_trace(comm, backend_ != nullptr ? *backend_ : cpu_backend(), path_, label_, window_stats_);
  if (comm.rank() == 0) {
    std::printf("trace: steps %d..%d of %d rank(s) written to %s (%.1f KB; open it in https://ui.perfetto.dev "
                "or chrome://tracing)\n",
                steps_.first, steps_.last, comm.size(), path_.c_str(), bytes / 1e3);
    std::fflush(stdout);
  }
}

namespace {

// AllGather moves bytes without arithmetic, so text travels as fp32 words (as the memory
// report's counters do).
std::vector<std::string> gather_strings(HostCollectives& hc, const std::string& mine) {
  Communicator& comm = hc.comm();
  const int N = comm.size();
  const size_t kMaxBytes = size_t(1) << 30;
  RZ_CHECK(mine.size() < kMaxBytes, "trace: rank %d recorded %zu bytes of events; narrow --trace-steps",
           comm.rank(), mine.size());
  std::vector<float> lens(static_cast<size_t>(N));
  const uint32_t my_len = static_cast<uint32_t>(mine.size());
  float word;
  std::memcpy(&word, &my_len, 4);
  hc.all_gather(&word, lens.data(), lens.size());
  std::vector<uint32_t> len(static_cast<size_t>(N));
  std::memcpy(len.data(), lens.data(), 4 * len.size());
  uint32_t longest = 0;
  for (int r = 0; r < N; ++r) {
    RZ_CHECK(len[r] < kMaxBytes, "trace: rank %d announced %u bytes of events (corrupt length)", r, len[r]);
    longest = std::max(longest, len[r]);
  }
  const size_t words = (longest + 3) / 4;
  std::vector<float> shard(words, 0.0f), all(words * static_cast<size_t>(N));
  std::memcpy(shard.data(), mine.data(), mine.size());
  if (words > 0) hc.all_gather(shard.data(), all.data(), all.size());
  std::vector<std::string> out(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r)
    out[r].assign(reinterpret_cast<const char*>(all.data() + static_cast<size_t>(r) * words), len[r]);
  return out;
}

}  // namespace

size_t write_merged_trace(Communicator& comm, Backend& backend, const std::string& path, const std::string& label,
                          const CommStats& window_stats) {
  using nlohmann::json;
  json counters = json::object();
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    counters[collective_name(static_cast<CollectiveKind>(k))] = {{"calls", window_stats.by_kind[k].calls},
                                                                  {"bytes_sent", window_stats.by_kind[k].bytes_sent}};
  const std::string mine = "{\"comm_counters\":" + counters.dump() + ",\"events\":[" +
                           trace::rank_events_json(comm.rank()) + "]}";
  HostCollectives hc(comm, backend);
  const std::vector<std::string> all = gather_strings(hc, mine);
  if (comm.rank() != 0) return 0;

  json events = json::array();
  json ranks = json::array();
  for (int r = 0; r < comm.size(); ++r) {
    json part = json::parse(all[r], nullptr, false);
    RZ_CHECK(!part.is_discarded() && part.contains("events"), "trace: rank %d sent events that are not JSON", r);
    const std::string row = label.empty() ? strfmt("rank %d", r) : strfmt("rank %d · %s", r, label.c_str());
    events.push_back({{"ph", "M"}, {"pid", r}, {"name", "process_name"}, {"args", {{"name", row}}}});
    events.push_back({{"ph", "M"}, {"pid", r}, {"name", "process_sort_index"}, {"args", {{"sort_index", r}}}});
    events.push_back({{"ph", "M"}, {"pid", r}, {"tid", int(trace::Track::compute)}, {"name", "thread_name"},
                      {"args", {{"name", "compute"}}}});
    events.push_back({{"ph", "M"}, {"pid", r}, {"tid", int(trace::Track::comm)}, {"name", "thread_name"},
                      {"args", {{"name", "comm"}}}});
    for (auto& e : part["events"]) events.push_back(std::move(e));
    ranks.push_back({{"rank", r}, {"comm_counters", part["comm_counters"]}});
  }
  json out = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"producer", "ringzero"},
                {"run", label},
                {"clock", "microseconds since every rank left the same barrier before the first traced step"},
                {"ranks", std::move(ranks)}}}};
  const std::string text = out.dump(1) + "\n";
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_file_atomic(path, text);
  return text.size();
}

}  // namespace rz
