// train/config_agree.h: what the ranks of one job must share, read off the settings table's
// `agree` column (train/config.h), as the (flag, value) pairs that the rendezvous compares
// across ranks (comm/rendezvous/agreement.h).
//
// Values are compared as text, except:
//   same_files     the files a key names (--data, --val-data, --init, a tokenizer.bin,
//                  --gpt2-dir's files; with no --tokenizer, the tokenizer.bin beside the data)
//                  by what they are, not where they lie: base name, size and a hash of the
//                  first 4 KiB (the shard and tokenizer headers and the first tokens), so two
//                  nodes may mount the same data at different paths;
//   same_kind      the device's kind (cpu, cuda, sim), not its GPU index;
//   same_presence  whether the key is set (--trace: every rank takes part in the timeline).
// Keys marked free (output paths, threads, timeouts, launch addressing) are left out.
#pragma once

#include <string>

#include "comm/options.h"
#include "train/config.h"

namespace rz {

// The pairs, in the settings table's order, flags spelt as on the command line ("--lr").
// Reads the first 4 KiB of every file a same_files key names; throws naming a file it
// cannot read.
SettingsToAgree settings_to_agree(const TrainConfig& cfg);

// One file as the agreement compares it: "NAME (SIZE bytes, head HASH)", HASH the 64-bit
// FNV-1a of its first 4096 bytes in hex. Throws naming the path when it is not a readable
// regular file.
std::string file_identity(const std::string& path);

// The directory `ringzero prepare` wrote a shard pattern's files to ("dir/train_*.bin" or
// "a.bin,b.bin": the first item's directory; "." for a bare name): where its tokenizer.bin
// and meta.json lie.
std::string prepared_dir_of(const std::string& data_pattern);

}  // namespace rz
