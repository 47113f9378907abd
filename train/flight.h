// train/flight.h: where a training job's flight records go, and the summary its launcher
// prints when the job fails (comm/debug/flight_recorder.h, comm/debug/flight_doctor.h).
#pragma once

#include <string>

#include "train/config.h"

namespace rz {

// The directory every rank of this job writes its flight record into: --flight-dir, else
// RINGZERO_FLIGHT_DIR (ringzero's launcher exports the one it chose to its ranks), else
// <save_dir>/flight, else $TMPDIR (or /tmp)/ringzero-<uid>/flight-<job>, where <job> is the
// same on every rank of a torchrun, srun or mpirun job (its port, job id or launcher pid) and
// ringzero-<uid> is this user's private directory (base/file.h's ensure_private_directory:
// made 0700; refused when it is a link, another user's or writable by others).
std::string resolve_flight_dir(const TrainConfig& cfg);

// After a launched job failed: when its ranks wrote flight records since `since` (Unix
// time), prints the doctor's lines to stderr and returns true.
bool print_flight_summary(const std::string& dir, double since);

double unix_now();

}  // namespace rz
