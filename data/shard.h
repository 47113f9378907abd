// data/shard.h: llm.c token shards (.bin), read memory-mapped and written atomically.
//
// Format (llm.c dev/data/data_common.py write_datafile): a header of 256 int32
// little-endian values, [0] = magic 20240520, [1] = version 1, [2] = token count; then the
// tokens as uint16 little-endian. A valid file is exactly 1024 + 2 x count bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/file.h"

namespace rz {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 256 * sizeof(int32_t);

// A read-only memory map of one shard; the header is checked on open.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);  // throws rz::Error naming path
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t count() const { return count_; }
  const uint16_t* tokens() const { return tokens_; }  // (count)

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint64_t count_ = 0;
  const uint16_t* tokens_ = nullptr;
};

// Streams tokens into path: they go to a temporary file beside it, which finish() completes
// with the header, fsyncs and renames into place. Destroying an unfinished writer removes
// the temporary file, so a crash never leaves a half-written shard under the final name.
class ShardWriter {
 public:
  explicit ShardWriter(const std::string& path);
  ~ShardWriter();  // an unfinished shard's temporary file is removed
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Each id must be in [0, 65536).
  void append(const int* tokens, size_t n);
  uint64_t count() const { return count_; }
  void finish();

 private:
  void flush();
  std::string path_;
  std::unique_ptr<AtomicFile> file_;  // null once finished
  uint64_t count_ = 0;
  std::basic_string<uint16_t> buf_;
};

// Writes a whole shard (tests, small tools).
void write_shard(const std::string& path, const int* tokens, size_t n);

}  // namespace rz
