// train/checkpoint.h: resumable, re-shardable training checkpoints.
//
// One directory per saved step, inside --save-dir:
//   step_00000010/
//     model.bin            rank 0: the model in llm.c's format (llm.c and `ringzero sample` read it)
//     rank_00000.state     every rank: its optimizer shard, loader position, RNG (format below)
//     rank_00001.state
//     COMPLETE             rank 0, last: JSON manifest (step, world, strategy, files with size and
//                          FNV-1a 64 checksum)
// Every file is written to "<name>.tmp", fsync'd and renamed, so a file that exists under its
// real name is whole. COMPLETE is written only after a barrier confirmed that every rank's
// file is on disk, and the directory is fsync'd after it: a directory without COMPLETE is
// an interrupted save and resume skips it.
//
// Re-sharding: a rank file holds the optimizer state of the flat-layout ranges its rank
// owned (Strategy::owned_ranges), in layout coordinates without padding. Loading reads every
// old rank's file into full (layout.total) master, m, v arrays, so any number of new ranks
// can each take their part through Strategy::set_optimizer_state.
//
// rank_RRRRR.state, little-endian:
//   header  16 x uint64: magic "RZSTATE1", version, rank, world, step, optimizer_step,
//           layout_total, nranges, nfloats, loader_epoch, loader_next_window, rng_state,
//           checksum (FNV-1a 64 of the whole file with this field zero), 3 reserved
//   ranges  nranges x (begin, end) uint64
//   master, m, v  nfloats float32 each (nfloats = sum of range lengths)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace rz {

// What one rank saves.
struct RankState {
  int rank = 0;
  int world = 1;
  uint64_t step = 0;            // training steps completed when saved
  uint64_t optimizer_step = 0;  // AdamW's t
  uint64_t layout_total = 0;    // parameters in the flat layout (a shape check on load)
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // owned [begin, end)
  std::vector<float> master, m, v;                    // concatenated over ranges
  uint64_t loader_epoch = 0;
  uint64_t loader_next_window = 0;
  uint64_t rng_state = 0;  // rank 0's sampling RNG
};

void write_rank_state(const std::string& path, const RankState& s);
// Throws a one-line error naming the file when it is truncated, corrupted or inconsistent.
RankState read_rank_state(const std::string& path);

// FNV-1a 64 of a whole file (throws naming the file if unreadable).
uint64_t file_fnv64(const std::string& path);


std::string checkpoint_dir_name(const std::string& save_dir, uint64_t step);  // save_dir/step_00000010
std::string rank_state_name(int rank);                                          // rank_00003.state

struct CheckpointManifest {
  uint64_t step = 0;
  int world = 1;
  std::string strategy;
  std::string precision;
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> files;  // name -> (bytes, fnv64)
};

// Rank 0 after the barrier: checksums every file in dir (model.bin and the world's rank
// files), writes COMPLETE atomically, fsyncs dir.
void write_manifest(const std::string& dir, uint64_t step, int world, const std::string& strategy,
                    const std::string& precision);
CheckpointManifest read_manifest(const std::string& dir);  // throws naming dir/COMPLETE

// Complete checkpoints in save_dir, oldest first (directories with a COMPLETE file).
std::vector<std::pair<uint64_t, std::string>> list_complete_checkpoints(const std::string& save_dir);
// Rank 0: deletes all but the newest `keep` complete checkpoints (keep 0: none deleted) and
// any incomplete directory older than the newest complete one.
void prune_checkpoints(const std::string& save_dir, int keep);

// Before step 1, on every rank: creates save_dir and writes and removes a probe file there,
// so an unwritable directory is an error before any work is done (naming the directory).
void probe_save_dir(const std::string& save_dir, int rank);

// Step directories (step_NNNNNNNN, complete or not) in save_dir.
std::vector<std::string> list_step_dirs(const std::string& save_dir);

// A checkpoint read back whole, with the optimizer state assembled to full arrays.
struct LoadedCheckpoint {
  std::string dir;
  CheckpointManifest manifest;
  uint64_t step = 0;
  uint64_t optimizer_step = 0;
  std::vector<float> master, m, v;     // (layout_total,) each
  std::vector<RankState> loader_only;  // per old rank: loader position and rng (no arrays)
};
// Verifies every file's size and checksum against the manifest, checks that the old ranks'
// ranges cover [0, layout_total), and assembles the arrays.
LoadedCheckpoint load_checkpoint(const std::string& dir, uint64_t layout_total);

// The checkpoint --resume continues from. newest_intact false (--resume yes): the newest
// complete one; when it is damaged, an error that says why and names the newest intact
// one (which --resume auto would take). newest_intact true (--resume auto): the newest
// that loads, each damaged one skipped with a line in *notes; dir empty when save_dir holds
// no complete checkpoint at all (a fresh start); an error when it holds only damaged ones.
LoadedCheckpoint load_resume_checkpoint(const std::string& save_dir, uint64_t layout_total, bool newest_intact,
                                        std::string* notes);

}  // namespace rz
