// base/file.h: files that appear whole or not at all.
//
// Checkpoints, token shards, tokenizer.bin and meta.json are all written the same way:
// into "<path>.tmp.<pid>" beside the target, fsync'd, renamed over the target, and the
// directory fsync'd so the rename itself survives a crash. A reader therefore sees the
// old file or the new one, never a torn one. An AtomicFile destroyed before commit()
// removes its temporary file.
//
// An output never destroys what the run reads or a file that is not its own: the commands
// call check_run_outputs() once, before any work, with every output path and every input;
// AtomicFile refuses on its own to rename over anything but a regular file, and writes
// /dev/null (a deliberate discard) in place. Inputs go through check_input_file() or
// open_input_file() before they are read, so a FIFO cannot block the open and a directory
// is not read as an empty file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rz {

class AtomicFile {
 public:
  // Throws rz::Error naming the file when path exists and is not a regular file (a
  // directory, a FIFO, a device, a symbolic link); /dev/null is written in place.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // A failed write (a full disk, a file-size limit) removes the temporary file and throws
  // naming the file and the system's reason.
  void write(const void* data, size_t bytes);
  void seek(size_t offset);  // e.g. to rewrite a header once the body's size is known
  void commit();             // fsync, rename into place, fsync the directory

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_;
  std::string tmp_;   // empty when writing /dev/null in place
  int fd_ = -1;
  void abandon();     // close and remove the temporary file
};

void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts);

// fsync a directory (after creating or renaming entries in it); errors are ignored on
// file systems that do not support it.
void fsync_directory(const std::string& dir);

// True when path names /dev/null (by device and inode, so a link to it counts too).
bool is_dev_null(const std::string& path);

// What an existing path is, in words for an error ("a directory", "a FIFO", "a symbolic
// link", ...), from lstat; empty when nothing is there or it is a regular file.
std::string non_regular_kind(const std::string& path);

// A path a command reads or writes, with the flag or key that named it (for the message).
struct RunPath {
  std::string what;  // an output: its flag or key ("--out", "metrics"); an input: what it is ("the config file")
  std::string path;
};

// Refuses, with one line naming the flag, the path and the reason, any output that would
// destroy something: a file output whose last component exists and is not a regular file
// (/dev/null is allowed: a discard); a file output that is an input (compared by device
// and inode after resolving symbolic links, so other spellings and hard links count) or
// lies inside an input directory; a directory output that exists and is not a directory,
// is or lies inside an input directory, or holds an input; two outputs that are one file.
// Inputs that do not exist are skipped (their reader names them).
void check_run_outputs(const std::vector<RunPath>& file_outputs, const std::vector<RunPath>& dir_outputs,
                       const std::vector<RunPath>& inputs);

// Refuses, naming `what` and the path, anything but an existing regular readable file. Uses
// stat, which never blocks, so a FIFO is refused before anything opens it.
void check_input_file(const std::string& path, const char* what);
// Opens a regular file for reading (O_NONBLOCK for the open only, so a FIFO cannot block it);
// throws naming `what` and the path otherwise. The caller closes the descriptor.
int open_input_file(const std::string& path, const char* what);

// A directory only this user can write, at `path` (whose parent is shared, like /tmp):
// created with mode 0700 when missing; refused, with one line naming it and what is wrong
// (`what` says what it is for), when it exists and is a symbolic link, not a directory,
// another user's, or writable by group or others. Checked with lstat after the mkdir, so a
// name someone else made first is never used.
void ensure_private_directory(const std::string& path, const char* what);

// The paths a shell glob (`*`, `?`, `[...]`) matches, sorted; empty when none match.
// `what` names the pattern's origin in the error thrown when the glob itself fails.
bool has_glob_wildcard(const std::string& s);
std::vector<std::string> glob_paths(const std::string& pattern, const char* what);

}  // namespace rz
