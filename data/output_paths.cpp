// data/output_paths.cpp: see output_paths.h.
#include "data/output_paths.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/check.h"

namespace fs = std::filesystem;

namespace rz {
namespace {

constexpr int32_t kLlmcTokenizerMagic = 20240328;  // tokenizer.bin's first int32 (data/tokenizer.cpp)
constexpr size_t kMetaHeadBytes = 4096;             // prepare's meta.json names its format within these

std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Lexical: "a/b" -> "a", "b" -> ".", "/b" -> "/".
std::string parent_of(const std::string& path) {
  const std::string p = without_trailing_slash(path);
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const std::string p = without_trailing_slash(path);
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// Absolute and lexically normal ("./x/../y" -> "$PWD/y"), links not resolved: the path as
// written, for comparing with a pattern as written.
std::string absolute_as_written(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::path(p).is_absolute() ? fs::path(p) : fs::current_path(ec) / p;
  return without_trailing_slash(a.lexically_normal().string());
}

std::string real_path(const std::string& p) {
  char* r = ::realpath(p.c_str(), nullptr);
  if (r == nullptr) return {};
  std::string out(r);
  std::free(r);
  return out;
}

bool same_directory(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && S_ISDIR(sa.st_mode) && S_ISDIR(sb.st_mode) &&
         sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The first `max` bytes of a regular file (opened without blocking on a FIFO and without
// following a link at its last component); empty when it is anything else.
std::string head_of_regular_file(const std::string& path, size_t max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    out.resize(max);
    const ssize_t n = ::pread(fd, out.data(), max, 0);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  return out;
}

// One item of a shard pattern (no comma): as written, or by name in the pattern's directory
// reached by any spelling (a symbolic link, "data/../data").
bool item_matches(const std::string& item, const std::string& path) {
  if (::fnmatch(absolute_as_written(item).c_str(), absolute_as_written(path).c_str(), FNM_PATHNAME | FNM_PERIOD) == 0)
    return true;
  if (::fnmatch(base_name(item).c_str(), base_name(path).c_str(), FNM_PERIOD) != 0) return false;
  const std::string out_dir = parent_of(path), item_dir = parent_of(item);
  std::vector<std::string> dirs = {item_dir};
  if (has_glob_wildcard(item_dir)) {
    try {
      dirs = glob_paths(item_dir, "data pattern");
    } catch (const Error&) {
      return false;  // the loader names a pattern that cannot be expanded
    }
  }
  for (const std::string& d : dirs)
    if (same_directory(d, out_dir)) return true;
  return false;
}

// The directories that hold `path`, innermost first, up to "/", links resolved. For a
// directory output that exists, the ones above where it resolves to.
std::vector<std::string> holders(const std::string& path, bool is_dir_output) {
  std::string start;
  struct stat st;
  if (is_dir_output && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    start = real_path(path);
    if (!start.empty() && start != "/") start = parent_of(start);
  } else {
    std::string q = parent_of(path);
    while (::stat(q.c_str(), &st) != 0 && q != "/" && q != ".") q = parent_of(q);
    start = real_path(q);
  }
  std::vector<std::string> out;
  for (std::string d = start; !d.empty(); d = parent_of(d)) {
    out.push_back(d);
    if (d == "/") break;
  }
  return out;
}

void check_one(const RunPath& o, bool is_dir, const CommandPaths& paths) {
  if (o.path.empty() || is_dev_null(o.path)) return;
  for (const RunPath& pattern : paths.shard_patterns) {
    if (pattern.path.empty()) continue;
    RZ_CHECK(!shard_pattern_matches(pattern.path, o.path),
             "%s: %s is a name the %s pattern '%s' matches: the next run would read it as a shard (write it "
             "elsewhere)",
             o.what.c_str(), o.path.c_str(), pattern.what.c_str(), pattern.path.c_str());
  }
  for (const std::string& dir : holders(o.path, is_dir)) {
    const std::string marker = prepared_data_marker(dir);
    RZ_CHECK(marker.empty(),
             "%s: %s lies inside %s, a prepared data directory (its %s says so): outputs stay out of the data "
             "(write it elsewhere)",
             o.what.c_str(), o.path.c_str(), dir.c_str(), marker.c_str());
  }
}

}  // namespace

bool shard_pattern_matches(const std::string& pattern, const std::string& path) {
  size_t start = 0;
  while (start <= pattern.size()) {
    size_t comma = pattern.find(',', start);
    if (comma == std::string::npos) comma = pattern.size();
    const std::string item = pattern.substr(start, comma - start);
    start = comma + 1;
    if (!item.empty() && item_matches(item, path)) return true;
  }
  return false;
}

std::string prepared_data_marker(const std::string& dir) {
  // prepare's meta.json is written with sorted keys: "format" comes within the first few
  // lines, ahead of the long lists ("sources", the shard names).
  if (head_of_regular_file(dir + "/meta.json", kMetaHeadBytes).find("llm.c token shards") != std::string::npos)
    return "meta.json";
  // Without it (removed by hand): llm.c's tokenizer.bin beside prepare's first shard. A
  // tokenizer.bin alone (kept in a project folder for `sample`) does not make a data directory.
  const std::string tok = head_of_regular_file(dir + "/tokenizer.bin", sizeof(int32_t));
  int32_t magic = 0;
  if (tok.size() == sizeof magic) std::memcpy(&magic, tok.data(), sizeof magic);
  struct stat st;
  if (magic == kLlmcTokenizerMagic && (::stat((dir + "/train_000000.bin").c_str(), &st) == 0 ||
                                       ::stat((dir + "/val_000000.bin").c_str(), &st) == 0))
    return "tokenizer.bin";
  return {};
}

void check_outputs(const CommandPaths& paths) {
  for (const auto* list : {&paths.files, &paths.dirs, &paths.record_dirs})
    for (const RunPath& o : *list)
      RZ_CHECK(o.path.find('\0') == std::string::npos,
               "%s: the path holds a NUL character, which would cut it short and write elsewhere", o.what.c_str());
  check_run_outputs(paths.files, paths.dirs, paths.inputs);
  for (const RunPath& o : paths.files) check_one(o, false, paths);
  for (const RunPath& o : paths.dirs) check_one(o, true, paths);
  for (const RunPath& o : paths.record_dirs) {
    struct stat st;
    RZ_CHECK(o.path.empty() || ::stat(o.path.c_str(), &st) != 0 || S_ISDIR(st.st_mode),
             "%s: %s exists and is not a directory", o.what.c_str(), o.path.c_str());
    check_one(o, true, paths);
  }
}

}  // namespace rz
