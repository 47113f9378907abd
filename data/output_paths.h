// data/output_paths.h: the one check every subcommand's outputs go through.
//
// An output never destroys an input and never becomes one. base/file.h's check_run_outputs
// covers what exists: an output over an input, inside an input directory, over anything but
// a regular file. What it cannot see is an output that does not exist yet and would become
// an input later: `--metrics DATA/train_000001.bin` is a new file, and the next run's
// `--data 'DATA/train_*.bin'` reads it as a shard ("bad magic"). So a command also names
// the data patterns it (or the training config it was given) reads, and check_outputs
// refuses, with one line naming the flag or key:
//   - every base/file.h rule (check_run_outputs);
//   - a file or directory output that one of those patterns would match, by name in the
//     pattern's directory (however that directory is spelt) or as the pattern is written;
//   - an output inside a prepared data directory (prepared_data_marker below): a file
//     anywhere under it, a directory strictly under it (`prepare --out DATA` may be the
//     prepared directory itself: it replaces that set).
//   - a path holding a NUL (the system would cut it short and write elsewhere).
// Every command's outputs go through it: train (--metrics, --memory-report, --trace,
// --save-dir, --flight-dir), bench-strategies --trace, plot --out and its script,
// prepare --out, comm-bench --flight-dir, export --to. A new output is one more line in its command's
// CommandPaths.
#pragma once

#include <string>
#include <vector>

#include "base/file.h"

namespace rz {

struct CommandPaths {
  std::vector<RunPath> files;           // file outputs: {flag or key, path}
  std::vector<RunPath> dirs;            // directory outputs (a save-dir: the command owns what it holds)
  std::vector<RunPath> record_dirs;     // directories it only adds its own named files to (flight
                                        // records): may hold inputs; must be a directory if there
  std::vector<RunPath> inputs;          // what the command reads (base/file.h's rules)
  std::vector<RunPath> shard_patterns;  // {key, pattern}: data patterns (globs, comma lists) a run reads
};

// Throws rz::Error with one line naming the output's flag, its path and the rule.
void check_outputs(const CommandPaths& paths);

// Whether `pattern` (a shard pattern: a glob or a comma list of paths) would read `path`.
bool shard_pattern_matches(const std::string& pattern, const std::string& path);

// What makes `dir` a directory `ringzero prepare` wrote: "meta.json" (prepare's, which
// describes llm.c token shards), else "tokenizer.bin" (llm.c's magic) beside a first shard
// (train_000000.bin or val_000000.bin); empty otherwise. Reads at most a few KiB, never
// blocks on a FIFO, never throws.
std::string prepared_data_marker(const std::string& dir);

}  // namespace rz
