#include "train/metrics.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file.h"

namespace rz {

MetricsWriter::~MetricsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void MetricsWriter::open(const std::string& path, bool append, int keep_through_step) {
  if (f_ != nullptr) std::fclose(f_);
  f_ = nullptr;
  path_ = path;
  // Appended to in place: anything but a regular file (a FIFO would block, a device or a
  // data file would be written into) is refused; /dev/null discards.
  const std::string kind = is_dev_null(path) ? std::string() : non_regular_kind(path);
  RZ_CHECK(kind.empty(), "metrics: %s exists and is %s; give a new or regular file's name (or /dev/null)",
           path.c_str(), kind.c_str());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // fopen below reports failures
  if (append && keep_through_step >= 0 && std::filesystem::exists(path)) {
    // A resumed run repeats the steps after its checkpoint: drop their old records (and
    // anything after the first line that is not a record) so each step appears once.
    std::ifstream in(path);
    std::string kept, line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
          j["step"].get<int64_t>() > keep_through_step)
        break;
      kept += line + "\n";
    }
    write_file_atomic(path, kept);
  }
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  RZ_CHECK(f_ != nullptr, "metrics: cannot open %s for writing: %s", path.c_str(), errno_string().c_str());
}

void MetricsWriter::write(const StepRecord& r) {
  if (f_ == nullptr) return;
  const std::string line = metrics_json_line(r) + "\n";
  RZ_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
           "metrics: cannot write %s: %s", path_.c_str(), errno_string().c_str());
}

std::string metrics_json_line(const StepRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  // NaN/inf are not JSON: they become null (the step is marked skipped or the run stops).
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  j["loss"] = num(r.loss);
  if (r.val_loss) j["val_loss"] = num(*r.val_loss);
  if (r.val_bpb) j["val_bpb"] = num(*r.val_bpb);
  if (r.hellaswag_acc) {
    j["hellaswag_acc"] = *r.hellaswag_acc;
    j["hellaswag_acc_norm"] = r.hellaswag_acc_norm.value_or(0.0);
    j["hellaswag_examples"] = r.hellaswag_examples;
  }
  j["lr"] = r.lr;
  j["grad_norm"] = num(r.grad_norm);
  j["tokens"] = r.tokens;
  j["tokens_per_s"] = r.tokens_per_s;
  j["step_ms"] = r.step_ms;
  j["comm_bytes"] = r.comm_bytes;
  j["comm_ms"] = r.comm_ms;
  j["overlap"] = r.overlap;
  if (r.skipped) j["skipped"] = true;
  if (r.spike) {
    j["spike_skipped"] = true;
    j["spike_zscore"] = num(r.spike_z);
  }
  if (r.skips_total > 0) j["skips_total"] = r.skips_total;
  nlohmann::json mem = nlohmann::json::object();
  for (int t = 0; t < kNumMemTags; ++t) mem[mem_tag_name(static_cast<MemTag>(t))] = r.mem_peak_bytes[t];
  mem["total"] = r.mem_peak_total;
  j["mem_peak_bytes"] = mem;
  return j.dump();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  if (t < 60) return strfmt("%lds", t);
  if (t < 3600) return strfmt("%ldm%02lds", t / 60, t % 60);
  return strfmt("%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

std::string format_progress(const StepRecord& r, double eta_s, const std::vector<float>& rank_peak_mib) {
  const int w = static_cast<int>(std::to_string(r.steps).size());
  std::string tps = r.tokens_per_s >= 1e6   ? strfmt("%.2fM", r.tokens_per_s / 1e6)
                    : r.tokens_per_s >= 1e3 ? strfmt("%.1fk", r.tokens_per_s / 1e3)
                                            : strfmt("%.0f", r.tokens_per_s);
  std::string line = strfmt("step %*d/%d | loss %.4f | lr %.2e | norm %.3f | %s tok/s | %.0f ms | ETA %s", w,
                            r.step, r.steps, r.loss, r.lr, r.grad_norm, tps.c_str(), r.step_ms,
                            format_duration(eta_s).c_str());
  if (r.skipped) line += " | SKIPPED (non-finite loss)";
  if (r.spike) line += std::isfinite(r.spike_z) ? strfmt(" | SKIPPED (spike, z %.1f)", r.spike_z) : " | SKIPPED (spike)";
  if (r.skips_total > 0) line += strfmt(" | skips %d", r.skips_total);
  if (!rank_peak_mib.empty()) {
    line += " | mem";
    for (size_t i = 0; i < rank_peak_mib.size(); ++i) line += strfmt(" r%zu %.1fM", i, rank_peak_mib[i]);
  }
  return line;
}

}  // namespace rz
