// train/config_resolved.h: what a run made of the keys left automatic (0, empty or auto),
// for the configuration table rank 0 prints (format_config_table's `resolved`): the value
// and where it came from, `vocab 257 (from the data's tokenizer.bin)` instead of `vocab 0`.
#pragma once

#include <map>
#include <string>

#include "base/memory.h"
#include "model/config.h"
#include "train/config.h"

namespace rz {

// The facts of a started run that the automatic keys resolved to.
struct RunFacts {
  GPT2Config model;                // the model's shape (after preset, --init, tokenizer)
  std::string tokenizer_beside;    // the tokenizer.bin found beside the data ("" when none)
  bool have_tokenizer = false;     // a tokenizer was given or found
  int omp_threads = 1;             // OpenMP threads this rank runs
  bool omp_env = false;            // OMP_NUM_THREADS was set
  int world = 1;
  int master_port = 0;             // the rendezvous port the ranks use
  std::string transport;           // the communicator's ("shm", "tcp", ...)
  Precision precision = Precision::fp32;
  Device device;                   // rank 0's
  std::string flight_dir;          // where flight records go
};

// key -> "value (from where)" for every key of cfg left automatic.
std::map<std::string, std::string> resolved_settings(const TrainConfig& cfg, const RunFacts& run);

}  // namespace rz
