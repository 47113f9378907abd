#include "base/file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include "base/check.h"

namespace rz {

namespace {

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void fsync_directory(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (is_dev_null(path_)) {  // a deliberate discard: written in place, nothing renamed over it
    fd_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    RZ_CHECK(fd_ >= 0, "%s: cannot open: %s", path_.c_str(), errno_string().c_str());
    return;
  }
  const std::string kind = non_regular_kind(path_);
  RZ_CHECK(kind.empty(), "%s: exists and is %s; refusing to replace it with a file (remove it, or write elsewhere)",
           path_.c_str(), kind.c_str());
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  // O_EXCL | O_NOFOLLOW: never write through a link planted at the temporary name. One left
  // by a killed process with this pid is removed first (unlink removes a link, not its target).
  for (int attempt = 0; attempt < 2; ++attempt) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0 || errno != EEXIST) break;
    ::unlink(tmp_.c_str());
  }
  RZ_CHECK(fd_ >= 0, "%s: cannot create %s: %s", path_.c_str(), tmp_.c_str(), errno_string().c_str());
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  RZ_CHECK(fd_ >= 0, "%s: write after commit or failure", path_.c_str());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {  // ENOSPC, EFBIG (SIGXFSZ is ignored: main.cpp), EIO, ...
      const std::string why = w < 0 ? errno_string() : std::string("no progress");
      abandon();
      RZ_FAIL("%s: write failed: %s (the partial temporary file was removed)", path_.c_str(), why.c_str());
    }
    p += w;
    bytes -= static_cast<size_t>(w);
  }
}

void AtomicFile::seek(size_t offset) {
  RZ_CHECK(fd_ >= 0, "%s: seek after commit or failure", path_.c_str());
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
    const std::string why = errno_string();
    abandon();
    RZ_FAIL("%s: seek failed: %s", path_.c_str(), why.c_str());
  }
}

void AtomicFile::commit() {
  RZ_CHECK(fd_ >= 0, "%s: committed twice or after a failure", path_.c_str());
  if (tmp_.empty()) {  // /dev/null
    ::close(fd_);
    fd_ = -1;
    return;
  }
  if (::fsync(fd_) != 0) {
    const std::string why = errno_string();
    abandon();
    RZ_FAIL("%s: cannot flush %s: %s", path_.c_str(), tmp_.c_str(), why.c_str());
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const std::string why = errno_string();
    ::unlink(tmp_.c_str());
    RZ_FAIL("%s: cannot flush %s: %s", path_.c_str(), tmp_.c_str(), why.c_str());
  }
  // Checked again: something may have appeared at the path since the constructor.
  if (const std::string kind = non_regular_kind(path_); !kind.empty()) {
    ::unlink(tmp_.c_str());
    RZ_FAIL("%s: exists and is %s; refusing to replace it with a file", path_.c_str(), kind.c_str());
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::string why = errno_string();
    ::unlink(tmp_.c_str());
    RZ_FAIL("%s: cannot rename %s into place: %s", path_.c_str(), tmp_.c_str(), why.c_str());
  }
  fsync_directory(dir_of(path_));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
  AtomicFile f(path);
  for (const auto& [data, bytes] : parts) f.write(data, bytes);
  f.commit();
}

bool has_glob_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> glob_paths(const std::string& pattern, const char* what) {
  glob_t g;
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  RZ_CHECK(rc == 0 || rc == GLOB_NOMATCH, "%s '%s': glob failed", what, pattern.c_str());
  return out;
}

namespace {

const char* mode_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

std::optional<FileId> id_of(const std::string& path, bool* is_dir = nullptr) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (is_dir != nullptr) *is_dir = S_ISDIR(st.st_mode);
  return FileId{st.st_dev, st.st_ino};
}

std::string real_path(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (r == nullptr) return {};
  std::string out(r);
  std::free(r);
  return out;
}

std::string parent_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// The directories that hold `path` (and `path` itself when include_self and it exists),
// innermost first, up to "/": from its nearest existing ancestor with symbolic links resolved.
std::vector<FileId> enclosing_dirs(const std::string& path, bool include_self) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (!include_self || !id_of(p)) {
    p = parent_of(p);
    while (!id_of(p) && p != "/" && p != ".") p = parent_of(p);
  }
  std::string real = real_path(p);
  std::vector<FileId> out;
  while (!real.empty()) {
    if (auto id = id_of(real)) out.push_back(*id);
    if (real == "/") break;
    real = parent_of(real);
  }
  return out;
}

bool contains(const std::vector<FileId>& v, const FileId& id) { return std::find(v.begin(), v.end(), id) != v.end(); }

struct Input {
  const RunPath* run;
  FileId id;
  bool dir = false;
  std::vector<FileId> holders;  // the directories that hold it
};

// Identifies an output for the "two outputs are one file" check: its own inode when it
// exists, else its resolved parent directory and its name.
std::string output_key(const std::string& path) {
  if (auto id = id_of(path)) return strfmt("%llu:%llu", static_cast<unsigned long long>(id->dev),
                                           static_cast<unsigned long long>(id->ino));
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::vector<FileId> up = enclosing_dirs(p, false);
  const size_t slash = p.find_last_of('/');
  const std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  return up.empty() ? p
                    : strfmt("%llu:%llu/%s", static_cast<unsigned long long>(up[0].dev),
                             static_cast<unsigned long long>(up[0].ino), name.c_str());
}

}  // namespace

bool is_dev_null(const std::string& path) {
  struct stat a, b;
  return ::stat(path.c_str(), &a) == 0 && ::stat("/dev/null", &b) == 0 && S_ISCHR(a.st_mode) &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string non_regular_kind(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return {};
  return mode_kind(st.st_mode);
}

void check_run_outputs(const std::vector<RunPath>& file_outputs, const std::vector<RunPath>& dir_outputs,
                       const std::vector<RunPath>& inputs) {
  std::vector<Input> in;
  for (const RunPath& r : inputs) {
    if (r.path.empty()) continue;
    Input x{&r, {}, false, {}};
    const auto id = id_of(r.path, &x.dir);
    if (!id) continue;
    x.id = *id;
    x.holders = enclosing_dirs(r.path, false);
    in.push_back(std::move(x));
  }
  std::vector<std::pair<std::string, const RunPath*>> keys;  // for outputs that collide
  auto note_key = [&keys](const RunPath& o) {
    const std::string k = output_key(o.path);
    for (const auto& [key, other] : keys)
      RZ_CHECK(key != k, "%s: %s is the same file as the %s output %s; each output needs its own path",
               o.what.c_str(), o.path.c_str(), other->what.c_str(), other->path.c_str());
    keys.emplace_back(k, &o);
  };
  for (const RunPath& o : file_outputs) {
    if (o.path.empty() || is_dev_null(o.path)) continue;
    RZ_CHECK(o.path.back() != '/', "%s: %s names a directory; give a file name", o.what.c_str(), o.path.c_str());
    const std::string kind = non_regular_kind(o.path);
    RZ_CHECK(kind.empty(),
             "%s: %s exists and is %s; an output is written beside it and renamed over it, which would replace it "
             "(give a new or regular file's name, or /dev/null to discard)",
             o.what.c_str(), o.path.c_str(), kind.c_str());
    const auto id = id_of(o.path);
    const std::vector<FileId> up = enclosing_dirs(o.path, false);
    for (const Input& x : in) {
      RZ_CHECK(!id || !(*id == x.id), "%s: %s is %s %s (the same file); an output never replaces an input",
               o.what.c_str(), o.path.c_str(), x.run->what.c_str(), x.run->path.c_str());
      RZ_CHECK(!x.dir || !contains(up, x.id), "%s: %s lies inside %s %s, an input directory; write it elsewhere",
               o.what.c_str(), o.path.c_str(), x.run->what.c_str(), x.run->path.c_str());
    }
    note_key(o);
  }
  for (const RunPath& o : dir_outputs) {
    if (o.path.empty()) continue;
    bool is_dir = false;
    const auto id = id_of(o.path, &is_dir);
    RZ_CHECK(!id || is_dir, "%s: %s exists and is not a directory", o.what.c_str(), o.path.c_str());
    const std::vector<FileId> self_and_up = enclosing_dirs(o.path, true);
    for (const Input& x : in) {
      RZ_CHECK(!x.dir || !contains(self_and_up, x.id), "%s: %s %s %s %s, an input directory; write it elsewhere",
               o.what.c_str(), o.path.c_str(), id && x.id == *id ? "is" : "lies inside", x.run->what.c_str(),
               x.run->path.c_str());
      RZ_CHECK(!id || !contains(x.holders, *id),
               "%s: %s holds %s %s; an output directory must not contain the run's inputs (write it elsewhere)",
               o.what.c_str(), o.path.c_str(), x.run->what.c_str(), x.run->path.c_str());
    }
    note_key(o);
  }
}

void ensure_private_directory(const std::string& path, const char* what) {
  const bool made = ::mkdir(path.c_str(), 0700) == 0;
  RZ_CHECK(made || errno == EEXIST, "%s: cannot create %s: %s", what, path.c_str(), errno_string().c_str());
  struct stat st;
  RZ_CHECK(::lstat(path.c_str(), &st) == 0, "%s: %s: %s", what, path.c_str(), errno_string().c_str());
  RZ_CHECK(S_ISDIR(st.st_mode), "%s: %s exists and is %s, not this user's private directory", what, path.c_str(),
           mode_kind(st.st_mode));
  RZ_CHECK(st.st_uid == ::geteuid(),
           "%s: %s belongs to user id %u, not to this user (%u): someone else made it first", what, path.c_str(),
           static_cast<unsigned>(st.st_uid), static_cast<unsigned>(::geteuid()));
  RZ_CHECK((st.st_mode & 022) == 0,
           "%s: %s is writable by %s (mode %04o): others could plant files in it", what, path.c_str(),
           (st.st_mode & 002) != 0 ? "everyone" : "its group", static_cast<unsigned>(st.st_mode & 07777));
}

void check_input_file(const std::string& path, const char* what) {
  struct stat st;
  RZ_CHECK(::stat(path.c_str(), &st) == 0, "%s %s: cannot open: %s", what, path.c_str(), errno_string().c_str());
  RZ_CHECK(S_ISREG(st.st_mode), "%s %s: is %s, not a regular file", what, path.c_str(), mode_kind(st.st_mode));
  RZ_CHECK(::access(path.c_str(), R_OK) == 0, "%s %s: cannot read: %s", what, path.c_str(), errno_string().c_str());
}

int open_input_file(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  RZ_CHECK(fd >= 0, "%s %s: cannot open: %s", what, path.c_str(), errno_string().c_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t m = st.st_mode;
    ::close(fd);
    RZ_FAIL("%s %s: is %s, not a regular file", what, path.c_str(), mode_kind(m));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace rz
