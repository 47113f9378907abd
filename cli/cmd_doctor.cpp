// cli/cmd_doctor.cpp: `ringzero doctor DIR`: the ranks' flight records merged into a few
// lines: who hangs where, or which ranks disagree on the program (comm/debug/flight_doctor.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "base/printable.h"
#include "comm/debug/flight_doctor.h"
#include "cli/command.h"

namespace rz {
namespace {

int run_doctor(int argc, char** argv) {
  std::string dir;
  CLI::App app{
      "Read the flight records a job's ranks wrote (DIR/rank<R>.json: on a comm timeout, a peer that died,\n"
      "a --comm-debug mismatch, SIGUSR1 or the --flight-watchdog) and say in a few lines what happened:\n"
      "which rank never issued the collective the others wait in (and where they wait, by ring round),\n"
      "or at which collective the ranks' programs part. `ringzero train` prints the same lines itself\n"
      "when a launched job fails this way. Records of an older job in DIR are left out.",
      "ringzero doctor"};
  app.add_option("dir", dir, "the job's flight directory (train --flight-dir; default <save-dir>/flight)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const DoctorReport rep = diagnose_flight_dir(dir);
  // The lines quote the records (hosts, purposes, errors): files anyone could have written,
  // escaped before they reach the terminal (base/printable.h).
  for (const auto& w : rep.warnings) std::fprintf(stderr, "ringzero doctor: %s\n", printable(w).c_str());
  if (rep.records > 0) std::printf("%d flight record(s) in %s:\n", rep.records, printable(dir).c_str());
  for (const auto& l : rep.lines) std::printf("%s%s\n", rep.records > 0 ? "  " : "", printable(l).c_str());
  return rep.records > 0 ? 0 : 2;
}

const RegisterCommand kRegister{Command{"doctor", "merge a failed job's flight records: who hangs where, who runs another program",
                                        run_doctor, 55}};

}  // namespace
}  // namespace rz
