#include "base/file.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

#include <cerrno>

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
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RZ_CHECK(fd_ >= 0, "%s: cannot create %s: %s", path_.c_str(), tmp_.c_str(), errno_string().c_str());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  RZ_CHECK(fd_ >= 0, "%s: write after commit", path_.c_str());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    RZ_CHECK(w > 0, "%s: write failed: %s", tmp_.c_str(), errno_string().c_str());
    p += w;
    bytes -= static_cast<size_t>(w);
  }
}

void AtomicFile::seek(size_t offset) {
  RZ_CHECK(fd_ >= 0, "%s: seek after commit", path_.c_str());
  RZ_CHECK(::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) >= 0, "%s: seek failed: %s", tmp_.c_str(),
           errno_string().c_str());
}

void AtomicFile::commit() {
  RZ_CHECK(fd_ >= 0, "%s: committed twice", path_.c_str());
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string why = errno_string();
    ::unlink(tmp_.c_str());
    RZ_FAIL("%s: cannot flush %s: %s", path_.c_str(), tmp_.c_str(), why.c_str());
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

}  // namespace rz
