// Fuzz target: training checkpoints (train/checkpoint.cpp): a rank's state file, and the
// COMPLETE manifest. The first byte picks which; the rest is the file.
#include "fuzz/fuzz_util.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] & 1) {
      const std::string path = rz::fuzz::write_input(data + 1, size - 1, "rank_00000.state");
      rz::RankState s = rz::read_rank_state(path);
      if (s.master.size() != s.m.size() || s.m.size() != s.v.size()) std::abort();
    } else {
      rz::fuzz::write_input(data + 1, size - 1, "COMPLETE");
      rz::CheckpointManifest m = rz::read_manifest(rz::fuzz::scratch_dir());
      if (m.world < 1) std::abort();
    }
  } catch (const rz::Error&) {
  }
  return 0;
}
