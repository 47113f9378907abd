// comm/debug/flight_doctor.h: the ranks' flight records, merged into a few lines (`ringzero doctor`).
//
// Each rank's record (comm/debug/flight_recorder.h, DIR/rank<R>.json) holds its side only. Read
// together they answer the two questions a stuck or failed job leaves:
//   - who hangs where: the ranks that never issued the collective the others wait in, or
//     left no record at all (stopped, killed, stuck outside the collectives), and where
//     the others wait ("ranks 0, 1, 3 wait in it, reduce_scatter round 1 of 3");
//   - whether the ranks run the same program: at the first sequence number where the
//     ranks' entries differ (op, count, dtype, reduce op, root, purpose, bucket, step), who
//     issued what ("rank 1 issued reduce_scatter #77 with 1,048,576 elements, rank 0
//     all_gather #77 with 524,288"), whether a rank skipped one (its #77 is the others'
//     #78), and what --comm-debug caught when it was on.
// The first line is the verdict; the launcher prints the same lines when a job fails.
// Records are input files: each is size-checked, parsed as JSON and type-checked field by
// field; a bad one is skipped with a warning naming it, never trusted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rz {

struct FlightRecordEntry {
  uint64_t seq = 0;
  std::string op, dtype, redop, purpose, state, phase;
  uint64_t count = 0;
  int root = -1, bucket = -1, round = 0, rounds = 0;
  int64_t step = -1;
  double t_issue = 0, t_start = 0, t_done = 0;
};

struct FlightRecordMismatch {
  uint64_t seq = 0;
  int other_rank = -1;
  std::string mine, theirs;  // "all_reduce(bf16, count 1024, avg)"
};

struct FlightRecordFile {
  std::string file;
  int rank = -1, world = 0;
  std::string backend, transport, job, reason, host, where;
  double written_at = 0;
  uint64_t issued = 0, done = 0;
  std::string error;
  int error_peer = -1;
  uint64_t error_seq = 0;
  bool has_mismatch = false;
  FlightRecordMismatch mismatch;
  std::vector<FlightRecordEntry> entries;  // by seq, ascending
};

// Parses one record; throws rz::Error naming `name` and what is wrong.
FlightRecordFile parse_flight_record(const std::string& text, const std::string& name);

struct DoctorReport {
  std::vector<std::string> lines;     // the verdict first, then a few details
  std::vector<std::string> warnings;  // records skipped, and why
  int records = 0;                    // records used
};

// The analysis of records that belong to one job (the caller picks them).
DoctorReport diagnose_flight_records(const std::vector<FlightRecordFile>& records);

// Reads DIR/rank*.json (records written before `newer_than`, a Unix time, are left out;
// 0: all), keeps the newest job's, and diagnoses them. A missing or empty directory gives
// a report whose only line says so.
DoctorReport diagnose_flight_dir(const std::string& dir, double newer_than = 0);

}  // namespace rz
