// train/config_agree.cpp: the settings every rank must share (config_agree.h).
#include "train/config_agree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "data/loader.h"

namespace fs = std::filesystem;

namespace rz {
namespace {

constexpr size_t kHeadBytes = 4096;

uint64_t fnv1a64(const unsigned char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : "; ") + s;
  return out;
}

// The files a same_files value names, each as file_identity() gives it: hf:DIR as DIR, a glob or a comma
// list (shards), a directory's regular files (--gpt2-dir), a file. A value that names no
// file ("byte", "gpt2") is compared as text.
std::string files_named(const std::string& value) {
  if (value.empty()) return "(none)";
  if (value.rfind("hf:", 0) == 0) return "hf: " + files_named(value.substr(3));  // --init hf:DIR
  if (has_glob_wildcard(value) || value.find(',') != std::string::npos) {
    std::vector<std::string> ids;
    for (const std::string& f : expand_shard_pattern(value)) ids.push_back(file_identity(f));
    return join(ids);
  }
  std::error_code ec;
  if (fs::is_directory(value, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(value, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    std::vector<std::string> ids;
    for (const auto& f : files) ids.push_back(file_identity(f));
    return ids.empty() ? "(an empty directory)" : join(ids);
  }
  if (fs::exists(value, ec)) return file_identity(value);
  return value;
}

}  // namespace

std::string prepared_dir_of(const std::string& data_pattern) {
  const fs::path dir = fs::path(data_pattern.substr(0, data_pattern.find(','))).parent_path();
  return dir.empty() ? "." : dir.string();
}

std::string file_identity(const std::string& path) {
  const int fd = open_input_file(path, "a file every rank must share");
  struct stat st {};
  unsigned char head[kHeadBytes];
  size_t got = 0;
  if (::fstat(fd, &st) == 0) {
    while (got < sizeof(head)) {
      const ssize_t n = ::read(fd, head + got, sizeof(head) - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
  }
  const int err = errno;
  ::close(fd);
  RZ_CHECK(st.st_size >= 0 && (got == kHeadBytes || got == static_cast<size_t>(st.st_size)),
           "%s: cannot read its first %zu bytes: %s", path.c_str(), kHeadBytes, std::strerror(err));
  return strfmt("%s (%lld bytes, head %016llx)", fs::path(path).filename().c_str(),
                static_cast<long long>(st.st_size), static_cast<unsigned long long>(fnv1a64(head, got)));
}

SettingsToAgree settings_to_agree(const TrainConfig& cfg) {
  SettingsToAgree out;
  for (const ConfigKey& k : config_keys()) {
    std::string flag = "--" + k.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const std::string v = get_config_value(cfg, k.name);
    switch (k.agree) {
      case Agree::same: out.emplace_back(flag, v); break;
      case Agree::same_files:
        if (k.name == "tokenizer" && v.empty()) {  // the one beside the data, when there is one
          const std::string beside = (fs::path(prepared_dir_of(cfg.data)) / "tokenizer.bin").string();
          out.emplace_back(flag, fs::exists(beside) ? "(beside the data) " + file_identity(beside) : "(none)");
        } else {
          out.emplace_back(flag, files_named(v));
        }
        break;
      case Agree::same_kind: out.emplace_back(flag, v.substr(0, v.find(':'))); break;
      case Agree::same_presence: out.emplace_back(flag, v.empty() ? "(not set)" : "(set)"); break;
      case Agree::free: break;
      case Agree::undecided: RZ_FAIL("settings table: key %s has not decided whether the ranks must agree on it", k.name.c_str());
    }
  }
  return out;
}

}  // namespace rz
