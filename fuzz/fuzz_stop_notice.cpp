// Fuzz target: the names and lines ringzero reads back from outside itself (issue 26): a
// rank's stop notice on its stderr, which the launcher parses (base/stop_signal.h), and a
// directory name in --save-dir, which decides what pruning may delete (train/checkpoint.h).
// Whatever parses must be exactly what the writer would have written.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/stop_signal.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  int rank = -1, sig = 0;
  if (rz::parse_stop_notice(line, &rank, &sig) && (rank < 0 || sig <= 0 || rz::stop_notice(rank, sig) != line))
    std::abort();
  if (const auto step = rz::parse_step_dir_name(line); step && rz::checkpoint_dir_name("", *step) != line)
    std::abort();
  return 0;
}
