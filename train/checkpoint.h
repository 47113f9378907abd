// train/checkpoint.h: resumable, re-shardable training checkpoints.
//
// One directory per saved step, inside --save-dir:
//   step_00000010/
//     model.bin            rank 0: a GPT-2 model in llm.c's format (llm.c and `ringzero sample` read it)
//     config.json          rank 0, instead of model.bin for the llama family: a Hugging Face
//     model.safetensors    directory's files (transformers and `ringzero sample` read it;
//                          model/saved_model.h)
//     rank_00000.state     every rank: its optimizer shard, loader position, RNG (format below)
//     rank_00001.state
//     COMPLETE             rank 0, last: JSON manifest (step, world, strategy, files with size and
//                          FNV-1a 64 checksum)
// Every file is written to "<name>.tmp.<pid>", fsync'd and renamed, so a file that exists under
// its real name is whole. COMPLETE is written only after a barrier confirmed that every
// rank's file is on disk, and the directory is fsync'd after it: a directory without
// COMPLETE is an interrupted save and resume skips it.
//
// Nothing is full-size in memory, saving or loading: the bytes stream between the files and
// the strategy's own arrays with at most one scratch chunk (zero/strategy.h's
// state_chunk_elems(), one --bucket-mb of fp32). Saving: each rank's file is written from
// Strategy::visit_optimizer_state's chunks (pointers into its arrays), the checksum computed
// as the bytes go out and the header rewritten last; the model goes through its family's
// SavedModelWriter (model/saved_model.h) from Strategy::visit_params_f32's chunks (zero3 gathers one unit at a
// time; bf16 is widened per chunk). Loading: load_checkpoint verifies every file (sizes,
// checksums by streaming, headers, that the old ranks' ranges cover the layout) without
// reading the arrays; read_checkpoint_state then reads, for each old rank's file, only the
// overlap of its ranges with the ranges this rank needs (seek + read, a chunk at a time) and
// hands the chunks to the strategy.
//
// Re-sharding: a rank file holds the optimizer state of the flat-layout ranges its rank
// owned (Strategy::owned_ranges), in layout coordinates without padding, so any number of
// new ranks can each read their part.
//
// rank_RRRRR.state, little-endian:
//   header  16 x uint64: magic "RZSTATE1", version, rank, world, step, optimizer_step,
//           layout_total, nranges, nfloats, loader_epoch, loader_next_window, rng_state,
//           checksum (FNV-1a 64 of the whole file with this field zero), 3 reserved
//   ranges  nranges x (begin, end) uint64
//   master, m, v  nfloats float32 each (nfloats = sum of range lengths)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rz {

// What one rank saves: the header's fields and ranges. The arrays are filled only by
// read_rank_state and read only by the two-argument write_rank_state (tests, tools).
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
  uint64_t nfloats() const;  // sum of the range lengths
};

// The optimizer-state arrays by index, in file order (zero/strategy.h's StateArray).
inline constexpr int kStateMaster = 0, kStateM = 1, kStateV = 2;
// A chunk of one array: consecutive values, in range order.
using StateChunkSink = std::function<void(int array, const float* data, size_t n)>;
// Calls `emit` with master's chunks, then m's, then v's, each covering nfloats values.
using StateSource = std::function<void(const StateChunkSink& emit)>;

// Writes s's header and ranges, then the arrays from `source` straight to the file (no
// copy); the checksum is computed on the way and the header rewritten with it at the end.
void write_rank_state(const std::string& path, const RankState& s, const StateSource& source);
// The same from s's own vectors.
void write_rank_state(const std::string& path, const RankState& s);
// Checks the header, the size, the checksum (streaming the file through a small buffer) and
// the ranges; the arrays are not read (left empty). Throws a one-line error naming the file
// when it is truncated, corrupted or inconsistent.
RankState read_rank_state_header(const std::string& path);
// read_rank_state_header, then the arrays too (tests, the fuzz target).
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

// The step of a directory named exactly as checkpoint_dir_name names it ("step_00000010");
// nothing for any other name ("step_abc", "step_-1", "step_000000010").
std::optional<uint64_t> parse_step_dir_name(const std::string& name);

// Complete checkpoints in save_dir, oldest first (step directories with a COMPLETE file).
std::vector<std::pair<uint64_t, std::string>> list_complete_checkpoints(const std::string& save_dir);

// Deletes what ringzero wrote in one step directory and nothing else: COMPLETE first, then
// the files a save writes (model.bin, rank_NNNNN.state and their "<name>.tmp.<pid>"
// temporaries), each under its exact name and either listed in the manifest or, without one,
// starting with its format's magic; then the directory if it is empty. Returns the paths
// left (anything else: a user's file, a subdirectory, a link), for the caller's warning.
std::vector<std::string> remove_checkpoint_dir(const std::string& dir);

// Before a save into dir (an interrupted save of the same step, resumed): removes the
// "<name>.tmp.<pid>" files a killed writer left, so none ends up inside the checkpoint.
void remove_stale_temporaries(const std::string& dir);

// Rank 0: removes (as remove_checkpoint_dir) all but the newest `keep` complete checkpoints
// (keep 0: none) and any interrupted save older than the newest complete one. Returns what
// was left.
std::vector<std::string> prune_checkpoints(const std::string& save_dir, int keep);

// Before step 1, on every rank: creates save_dir and writes and removes a probe file there,
// so an unwritable directory is an error before any work is done (naming the directory).
void probe_save_dir(const std::string& save_dir, int rank);

// Step directories (named as checkpoint_dir_name names them, complete or not; not links) in
// save_dir, oldest first.
std::vector<std::string> list_step_dirs(const std::string& save_dir);

// A verified checkpoint: its manifest and every old rank's header and ranges (the arrays
// stay in the files until read_checkpoint_state).
struct LoadedCheckpoint {
  std::string dir;
  CheckpointManifest manifest;
  uint64_t step = 0;
  uint64_t optimizer_step = 0;
  std::vector<RankState> ranks;  // per old rank: loader position, rng, ranges (no arrays)
};
// Verifies every file's size and checksum against the manifest and each rank file's own
// header and checksum, and checks that the old ranks' ranges cover [0, layout_total).
LoadedCheckpoint load_checkpoint(const std::string& dir, uint64_t layout_total);

// Where one rank's part of the optimizer state goes.
struct StateTarget {
  std::vector<std::pair<uint64_t, uint64_t>> master_ranges;  // layout ranges whose master values it needs
  std::vector<std::pair<uint64_t, uint64_t>> moment_ranges;  // ... whose m and v it needs
  size_t chunk_elems = size_t{1} << 16;                      // the most floats read at once
  // array (kStateMaster, kStateM, kStateV), the chunk's first layout element, values.
  std::function<void(int array, uint64_t begin, const float* data, size_t n)> put;
};
// For each old rank's file in rank order, reads the overlap of its ranges with the target's
// ranges (seek + read into one scratch buffer of at most chunk_elems floats, MemTag::workspace)
// and hands each chunk to put. ck comes from load_checkpoint.
void read_checkpoint_state(const LoadedCheckpoint& ck, const StateTarget& target);

// The checkpoint --resume continues from. newest_intact false (--resume yes): the newest
// complete one; when it is damaged, an error that says why and names the newest intact
// one (which --resume auto would take). newest_intact true (--resume auto): the newest
// that loads, each damaged one skipped with a line in *notes ("resume auto: skipped damaged
// checkpoint DIR: WHY"); dir empty when save_dir holds no complete checkpoint at all (a
// fresh start); an error when it holds only damaged ones. set_aside (rank 0 of an auto
// resume): the damaged ones newer than the one taken are renamed DIR.damaged, whole, so
// that --keep does not count them and the saves of their steps are not refused.
LoadedCheckpoint load_resume_checkpoint(const std::string& save_dir, uint64_t layout_total, bool newest_intact,
                                        std::string* notes, bool set_aside = false);

}  // namespace rz
