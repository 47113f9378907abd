// train/save_dir_lock.cpp: see save_dir_lock.h.
#include "train/save_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/check.h"
#include "base/printable.h"

namespace fs = std::filesystem;

namespace rz {
namespace {

constexpr const char* kLockEnv = "RINGZERO_SAVE_DIR_LOCK";
constexpr size_t kHolderBytes = 4096;  // the most of a holder's line that is read or written

std::string lock_path(const std::string& save_dir) { return (fs::path(save_dir) / SaveDirLock::file_name()).string(); }

// "pid 1234 on host h since 2026-12-07 10:00:01: ringzero train --save-dir ck ...": who
// holds the lock, for the job it refuses.
std::string holder_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cmd = ss.str();
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  // The executable's full path says less than its name.
  const size_t space = cmd.find(' '), slash = cmd.rfind('/', space);
  if (slash != std::string::npos) cmd.erase(0, slash + 1);
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  char when[32] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::localtime_r(&now, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  std::string line = strfmt("pid %d on host %s since %s: %s", static_cast<int>(::getpid()), printable(host).c_str(),
                            when, printable(cmd).c_str());
  if (line.size() > kHolderBytes - 1) line = line.substr(0, kHolderBytes - 4) + "...";
  return line + "\n";
}

// What the holder wrote: its first line, escaped (anyone who can write the directory can
// write the file).
std::string read_holder(int fd) {
  std::string text(kHolderBytes, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  const size_t nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  return printable(text);
}

bool no_lock_support(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

}  // namespace

SaveDirLock::~SaveDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

SaveDirLock::SaveDirLock(SaveDirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

SaveDirLock& SaveDirLock::operator=(SaveDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

SaveDirLock SaveDirLock::acquire(const std::string& save_dir) {
  SaveDirLock lock;
  if (save_dir.empty()) return lock;
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  RZ_CHECK(fs::is_directory(save_dir), "save_dir: cannot create %s: %s", save_dir.c_str(),
           ec ? ec.message().c_str() : "not a directory");
  const std::string path = lock_path(save_dir);
  // O_NOFOLLOW: a link planted at the name is refused, never followed; O_NONBLOCK: a FIFO
  // there cannot block the open (it is refused just below).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    RZ_CHECK(err != ELOOP, "save_dir: %s is a symbolic link; the lock file is ringzero's own (remove the link)",
             path.c_str());
    RZ_FAIL("save_dir: cannot open its lock file %s: %s", path.c_str(), std::strerror(err));
  }
  lock.fd_ = fd;
  struct stat st;
  RZ_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode),
           "save_dir: %s is not a regular file; the lock file is ringzero's own (remove it)", path.c_str());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const std::string holder = read_holder(fd);
      RZ_FAIL("save_dir: %s is in use by another job (%s; it holds %s). One job per save-dir: wait for it to end, "
              "or give another --save-dir",
              save_dir.c_str(), holder.empty() ? "it has not said who it is yet" : holder.c_str(), path.c_str());
    }
    RZ_CHECK(no_lock_support(err), "save_dir: cannot lock %s: %s", path.c_str(), std::strerror(err));
    std::fprintf(stderr, "ringzero: warning: save_dir %s: this file system cannot lock %s (%s): nothing keeps a "
                 "second job out of this directory\n", save_dir.c_str(), path.c_str(), std::strerror(err));
  }
  const std::string line = holder_line();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()))
    std::fprintf(stderr, "ringzero: warning: save_dir %s: could not write this job's name into %s: %s\n",
                 save_dir.c_str(), path.c_str(), std::strerror(errno));
  return lock;
}

SaveDirLock SaveDirLock::for_launcher(const std::string& save_dir, int node_rank) {
  if (save_dir.empty() || node_rank != 0) return {};
  SaveDirLock lock = acquire(save_dir);
  // Inherited by every rank across fork and exec: the lock lives while any of them does.
  RZ_SYSCHECK(::fcntl(lock.fd_, F_SETFD, 0), "save_dir: cannot pass the lock on %s to the ranks", save_dir.c_str());
  ::setenv(kLockEnv, std::to_string(lock.fd_).c_str(), 1);
  return lock;
}

SaveDirLock SaveDirLock::for_rank(const std::string& save_dir, int rank) {
  SaveDirLock lock;
  if (const char* e = std::getenv(kLockEnv); e != nullptr) {
    const std::string text = e;
    ::unsetenv(kLockEnv);  // nothing this rank starts inherits it
    char* end = nullptr;
    const long fd = std::strtol(text.c_str(), &end, 10);
    struct stat held, named;
    // Only the descriptor of this save_dir's lock file is taken as the launcher's lock.
    if (!save_dir.empty() && end != text.c_str() && *end == '\0' && fd >= 0 && fd < (1L << 20) &&
        ::fstat(static_cast<int>(fd), &held) == 0 && ::lstat(lock_path(save_dir).c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      lock.fd_ = static_cast<int>(fd);
      ::fcntl(lock.fd_, F_SETFD, FD_CLOEXEC);
      return lock;
    }
  }
  if (rank != 0) return lock;
  return acquire(save_dir);
}

}  // namespace rz
