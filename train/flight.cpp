// train/flight.cpp: see flight.h.
#include "train/flight.h"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/check.h"
#include "base/file.h"
#include "base/printable.h"
#include "comm/debug/flight_doctor.h"

namespace rz {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

std::string resolve_flight_dir(const TrainConfig& cfg) {
  if (!cfg.flight_dir.empty()) return cfg.flight_dir;
  if (std::string e = env("RINGZERO_FLIGHT_DIR"); !e.empty()) return e;
  if (!cfg.save_dir.empty()) return (std::filesystem::path(cfg.save_dir) / "flight").string();
  std::string job = env("SLURM_JOB_ID");
  if (job.empty()) job = env("OMPI_MCA_ess_base_jobid");
  if (job.empty() && !env("MASTER_PORT").empty()) job = "port" + env("MASTER_PORT");
  if (job.empty()) job = strfmt("pid%d", static_cast<int>(getpid()));
  for (char& c : job)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  std::string tmp = env("TMPDIR");
  if (tmp.empty()) tmp = "/tmp";
  // Not a name in the shared temp dir that another local user could make first and fill
  // (records the doctor would believe): a directory only this user can write, then the job.
  const std::string mine = (std::filesystem::path(tmp) / strfmt("ringzero-%u", static_cast<unsigned>(geteuid()))).string();
  try {
    ensure_private_directory(mine, "flight_dir (the default)");
  } catch (const Error& e) {
    RZ_FAIL("%s; remove it, or give --flight-dir or --save-dir to keep the flight records elsewhere", e.what());
  }
  return (std::filesystem::path(mine) / ("flight-" + job)).string();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool print_flight_summary(const std::string& dir, double since) {
  const DoctorReport rep = diagnose_flight_dir(dir, since);
  if (rep.records == 0) return false;
  const std::string shown = printable(dir);
  std::fprintf(stderr, "ringzero: the ranks' flight records (%s; `ringzero doctor %s` reads them again):\n",
               shown.c_str(), shown.c_str());
  // As `doctor` prints them: the records' text escaped (base/printable.h).
  for (const auto& l : rep.lines) std::fprintf(stderr, "  %s\n", printable(l).c_str());
  for (const auto& w : rep.warnings) std::fprintf(stderr, "  (%s)\n", printable(w).c_str());
  return true;
}

}  // namespace rz
