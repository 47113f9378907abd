// base/file.h: files that appear whole or not at all.
//
// Checkpoints, token shards, tokenizer.bin and meta.json are all written the same way:
// into "<path>.tmp.<pid>" beside the target, fsync'd, renamed over the target, and the
// directory fsync'd so the rename itself survives a crash. A reader therefore sees the
// old file or the new one, never a torn one. An AtomicFile destroyed before commit()
// removes its temporary file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rz {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // throws rz::Error naming the file
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void seek(size_t offset);  // e.g. to rewrite a header once the body's size is known
  void commit();             // fsync, rename into place, fsync the directory

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
};

void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts);

// fsync a directory (after creating or renaming entries in it); errors are ignored on
// file systems that do not support it.
void fsync_directory(const std::string& dir);

// The paths a shell glob (`*`, `?`, `[...]`) matches, sorted; empty when none match.
// `what` names the pattern's origin in the error thrown when the glob itself fails.
bool has_glob_wildcard(const std::string& s);
std::vector<std::string> glob_paths(const std::string& pattern, const char* what);

}  // namespace rz
