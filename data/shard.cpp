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

}  // namespace

ShardReader::ShardReader(const std::string& path) : path_(path) {
  const int fd = open_input_file(path, "token shard");  // a FIFO or directory: refused, never blocks
  struct stat st;
  if (::fstat(fd, &st) < 0) {
    ::close(fd);
    RZ_FAIL("%s: cannot stat token shard: %s", path.c_str(), errno_string().c_str());
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

ShardWriter::ShardWriter(const std::string& path) : path_(path), file_(std::make_unique<AtomicFile>(path)) {
  int32_t header[256] = {};  // zeros until finish() knows the count
  file_->write(header, sizeof(header));
  buf_.reserve(1 << 20);
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append(const int* tokens, size_t n) {
  RZ_CHECK(file_ != nullptr, "%s: append after finish", path_.c_str());
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
  file_->write(buf_.data(), buf_.size() * sizeof(uint16_t));
  buf_.clear();
}

void ShardWriter::finish() {
  RZ_CHECK(file_ != nullptr, "%s: finished twice", path_.c_str());
  flush();
  int32_t header[256] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(count_);
  file_->seek(0);
  file_->write(header, sizeof(header));
  file_->commit();
  file_.reset();
}

void write_shard(const std::string& path, const int* tokens, size_t n) {
  ShardWriter w(path);
  w.append(tokens, n);
  w.finish();
}


}  // namespace rz
