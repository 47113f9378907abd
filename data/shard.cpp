// data/shard.cpp: llm.c token shards.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>

#include "base/check.h"

namespace rz {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian; ringzero reads them in place");

namespace {

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    RZ_SYSCHECK(w, "%s: write failed", path.c_str());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Makes a rename durable: fsync the directory that holds the new name.
void fsync_dir(const std::string& path) {
  int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

}  // namespace

ShardReader::ShardReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  RZ_SYSCHECK(fd, "%s: cannot open token shard", path.c_str());
  struct stat st;
  if (::fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    RZ_FAIL("%s: not a regular file (expected an llm.c token shard)", path.c_str());
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    RZ_FAIL("%s: %zu bytes, shorter than the 1024-byte shard header (truncated?)", path.c_str(), size);
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  RZ_CHECK(m != MAP_FAILED, "%s: mmap failed: %s", path.c_str(), errno_string().c_str());
  map_ = m;
  map_bytes_ = size;
  const int32_t* header = static_cast<const int32_t*>(m);
  // From here on a failed check must unmap: the destructor does not run for a throwing ctor.
  std::string err;
  if (header[0] != kShardMagic) {
    err = strfmt("%s: bad magic %d (expected %d: an llm.c token shard)", path.c_str(), header[0],
                 kShardMagic);
  } else if (header[1] != kShardVersion) {
    err = strfmt("%s: version %d (expected %d: uint16 tokens)", path.c_str(), header[1], kShardVersion);
  } else if (header[2] < 0 ||
             size != kShardHeaderBytes + 2 * static_cast<uint64_t>(static_cast<uint32_t>(header[2]))) {
    err = strfmt("%s: header says %d tokens (%llu bytes) but the file has %zu bytes", path.c_str(),
                 header[2], static_cast<unsigned long long>(kShardHeaderBytes + 2ull * static_cast<uint32_t>(header[2])),
                 size);
  }
  if (!err.empty()) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    fail(err);
  }
  count_ = static_cast<uint64_t>(header[2]);
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(m) + kShardHeaderBytes);
  ::madvise(m, size, MADV_RANDOM);  // windows are visited in shuffled order
}

ShardReader::~ShardReader() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

ShardWriter::ShardWriter(const std::string& path) : path_(path), tmp_path_(temp_name(path)) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RZ_SYSCHECK(fd_, "%s: cannot create", tmp_path_.c_str());
  int32_t header[256] = {};  // placeholder, rewritten by finish()
  write_all(fd_, header, sizeof(header), tmp_path_);
  buf_.reserve(1 << 20);
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void ShardWriter::append(const int* tokens, size_t n) {
  RZ_CHECK(fd_ >= 0, "%s: append after finish", path_.c_str());
  for (size_t i = 0; i < n; i++) {
    RZ_CHECK(tokens[i] >= 0 && tokens[i] < 65536, "%s: token id %d does not fit uint16", path_.c_str(),
             tokens[i]);
    buf_.push_back(static_cast<uint16_t>(tokens[i]));
    if (buf_.size() == (1u << 20)) flush();
  }
  count_ += n;
  RZ_CHECK(count_ <= 0x7FFFFFFFu, "%s: more than 2^31-1 tokens; the header's count is an int32",
           path_.c_str());
}

void ShardWriter::flush() {
  write_all(fd_, buf_.data(), buf_.size() * sizeof(uint16_t), tmp_path_);
  buf_.clear();
}

void ShardWriter::finish() {
  RZ_CHECK(fd_ >= 0, "%s: finished twice", path_.c_str());
  flush();
  int32_t header[256] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(count_);
  RZ_SYSCHECK(::lseek(fd_, 0, SEEK_SET), "%s: seek failed", tmp_path_.c_str());
  write_all(fd_, header, sizeof(header), tmp_path_);
  RZ_SYSCHECK(::fsync(fd_), "%s: fsync failed", tmp_path_.c_str());
  RZ_SYSCHECK(::close(fd_), "%s: close failed", tmp_path_.c_str());
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) < 0) {
    std::string e = errno_string();
    ::unlink(tmp_path_.c_str());
    RZ_FAIL("%s: cannot rename %s into place: %s", path_.c_str(), tmp_path_.c_str(), e.c_str());
  }
  fsync_dir(path_);
}

void write_shard(const std::string& path, const int* tokens, size_t n) {
  ShardWriter w(path);
  w.append(tokens, n);
  w.finish();
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::string tmp = temp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RZ_SYSCHECK(fd, "%s: cannot create", tmp.c_str());
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    RZ_SYSCHECK(::fsync(fd), "%s: fsync failed", tmp.c_str());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    std::string e = errno_string();
    ::unlink(tmp.c_str());
    RZ_FAIL("%s: cannot rename %s into place: %s", path.c_str(), tmp.c_str(), e.c_str());
  }
  fsync_dir(path);
}

}  // namespace rz
