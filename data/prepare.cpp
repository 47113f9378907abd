// data/prepare.cpp: text files -> llm.c token shards.
//
// Each input file (or, with split_fortunes, each fortune: the text between lines that are
// exactly "%") is a document. A document starts with the EOT token and goes whole to val or
// to train by one seeded draw (Xoshiro256(seed, 0): uniform() < val_fraction), so the split
// is reproducible and follows document boundaries. Documents keep input order within a split.
//
// Streaming: files are read in 1 MiB chunks and fed to Tokenizer::encode_stream, which
// encodes the longest prefix that later bytes cannot change (for gpt2: up to the last
// settled pre-token boundary) and leaves the rest in a carry buffer. A carry that grows past
// kMaxCarry (a single "word" over 1 MiB, which real text never has) is encoded as if the
// document ended there, cut at a UTF-8 boundary: memory stays bounded on any input.
// Tokens go to ShardWriter, which starts a new file every shard_tokens tokens.
#include "data/prepare.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/stop_signal.h"
#include "base/file.h"
#include "base/process.h"
#include "data/output_paths.h"
#include "data/rng.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/unicode.h"

namespace rz {

namespace {

constexpr size_t kChunkBytes = 1u << 20;
constexpr size_t kMaxCarry = 1u << 20;

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// One split's sequence of shard files: <dir>/<split>_000000.bin, _000001.bin, ...
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, uint64_t shard_tokens)
      : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens) {}

  void append(const int* tokens, size_t n) {
    while (n > 0) {
      if (!cur_) {
        names_.push_back(strfmt("%s_%06zu.bin", split_.c_str(), names_.size()));
        cur_ = std::make_unique<ShardWriter>(dir_ + "/" + names_.back());
      }
      size_t take = static_cast<size_t>(std::min<uint64_t>(n, shard_tokens_ - cur_->count()));
      cur_->append(tokens, take);
      tokens += take;
      n -= take;
      total_ += take;
      if (cur_->count() == shard_tokens_) finish_shard();
    }
  }
  void finish() {
    if (cur_) finish_shard();
  }
  uint64_t total() const { return total_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  void finish_shard() {
    cur_->finish();
    cur_.reset();
  }
  std::string dir_, split_;
  uint64_t shard_tokens_;
  std::unique_ptr<ShardWriter> cur_;
  std::vector<std::string> names_;
  uint64_t total_ = 0;
};

// Feeds one document at a time through the tokenizer into its split's writer.
class DocumentEncoder {
 public:
  DocumentEncoder(const Tokenizer& tok, SplitWriter* train, SplitWriter* val, double val_fraction,
                  uint64_t seed, PrepareStats* stats)
      : tok_(tok), train_(train), val_(val), val_fraction_(val_fraction), rng_(seed, 0), stats_(stats) {}

  void feed(const char* p, size_t n) {
    if (n == 0) return;
    if (!out_) begin();
    carry_.append(p, n);
    encode(false);
  }
  // count_empty: whether an empty document counts as skipped (not at a fortune file's end).
  void end(bool count_empty = true) {
    if (!out_) {
      if (count_empty) stats_->empty_docs++;
      return;
    }
    encode(true);
    out_ = nullptr;
  }

 private:
  void begin() {
    bool to_val = val_fraction_ > 0 && rng_.uniform() < val_fraction_;
    out_ = to_val ? val_ : train_;
    (to_val ? stats_->val_docs : stats_->train_docs)++;
    int eot = tok_.eot();
    out_->append(&eot, 1);
  }
  void encode(bool final) {
    tokens_.clear();
    size_t done = tok_.encode_stream(carry_, final, &tokens_);
    if (!final && carry_.size() - done > kMaxCarry) {
      const auto* s = reinterpret_cast<const unsigned char*>(carry_.data());
      size_t cut = carry_.size() - unicode::incomplete_utf8_tail(s, carry_.size());
      done += tok_.encode_stream(std::string_view(carry_).substr(done, cut - done), true, &tokens_);
    }
    carry_.erase(0, done);
    out_->append(tokens_.data(), tokens_.size());
  }

  const Tokenizer& tok_;
  SplitWriter *train_, *val_, *out_ = nullptr;
  double val_fraction_;
  Xoshiro256 rng_;
  PrepareStats* stats_;
  std::string carry_;
  std::vector<int> tokens_;
};

// Progress on stderr: redrawn in place on a terminal, a line every 64 MB otherwise.
class Progress {
 public:
  explicit Progress(bool on) : on_(on), tty_(on && ::isatty(2)) {}
  void update(uint64_t bytes, uint64_t tokens, bool last = false) {
    if (!on_) return;
    double t = seconds();
    bool due = tty_ ? (t - last_t_ >= 0.5) : (bytes - last_bytes_ >= (64ull << 20));
    if (!due && !(last && printed_)) return;
    last_t_ = t;
    last_bytes_ = bytes;
    printed_ = true;
    std::fprintf(stderr, "%sprepare: %.1f MB read, %llu tokens, %.1f MB/s%s", tty_ ? "\r" : "",
                 bytes / 1e6, static_cast<unsigned long long>(tokens), bytes / 1e6 / std::max(t, 1e-9),
                 tty_ && !last ? "" : "\n");
  }
  double cpu_seconds() const { return cpu_now() - cpu_start_; }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  bool on_, tty_;
  bool printed_ = false;
  double last_t_ = 0;
  uint64_t last_bytes_ = 0;
  static double cpu_now() {
    timespec ts;
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  }
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double cpu_start_ = cpu_now();
};

void make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); i++) {
    if (i == dir.size() || dir[i] == '/') {
      std::string d = dir.substr(0, i);
      if (::mkdir(d.c_str(), 0755) < 0 && errno != EEXIST)
        RZ_FAIL("--out %s: cannot create %s: %s", dir.c_str(), d.c_str(), errno_string().c_str());
    }
  }
  struct stat st;
  RZ_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "--out %s: not a directory", dir.c_str());
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool split_fortunes) {
  std::vector<std::string> out;
  std::set<std::string> seen;  // canonical paths: a .u8 symlink to a file already listed is skipped
  auto add_file = [&](const std::string& path) {
    if (split_fortunes && ends_with(path, ".dat")) return;  // strfile's index, not text
    char* real = ::realpath(path.c_str(), nullptr);
    RZ_CHECK(real != nullptr, "--input %s: %s", path.c_str(), errno_string().c_str());
    std::string canon(real);
    std::free(real);
    if (seen.insert(canon).second) out.push_back(path);
  };
  for (const std::string& in : inputs) {
    struct stat st;
    if (::stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      DIR* d = ::opendir(in.c_str());
      RZ_CHECK(d != nullptr, "--input %s: cannot list directory: %s", in.c_str(), errno_string().c_str());
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.empty() || name[0] == '.') continue;
        std::string path = in + (in.back() == '/' ? "" : "/") + name;
        struct stat fst;
        if (::stat(path.c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) names.push_back(path);
      }
      ::closedir(d);
      std::sort(names.begin(), names.end());
      RZ_CHECK(!names.empty(), "--input %s: directory has no regular files", in.c_str());
      for (const auto& p : names) add_file(p);
    } else if (has_glob_wildcard(in)) {
      const std::vector<std::string> names = glob_paths(in, "--input");
      RZ_CHECK(!names.empty(), "--input %s: the pattern matches no files", in.c_str());
      for (const auto& p : names) {
        struct stat fst;
        if (::stat(p.c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) add_file(p);
      }
    } else {
      RZ_CHECK(::stat(in.c_str(), &st) == 0, "--input %s: no such file or directory", in.c_str());
      RZ_CHECK(S_ISREG(st.st_mode), "--input %s: not a regular file or directory", in.c_str());
      add_file(in);
    }
  }
  RZ_CHECK(!out.empty(), "--input: no input files");
  return out;
}

namespace {

// The build directory beside out_dir: "<parent>/.<name>.prepare.<pid>".
std::string staging_prefix(const std::string& out_dir) {
  std::string d = out_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : d.substr(0, slash);
  const std::string name = slash == std::string::npos ? d : d.substr(slash + 1);
  return parent + "/." + name + ".prepare.";
}

void remove_tree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

bool is_prepare_output(const std::string& name) {
  if (name == "meta.json" || name == "tokenizer.bin") return true;
  for (const char* split : {"train_", "val_"}) {
    const size_t n = std::char_traits<char>::length(split);
    if (name.rfind(split, 0) == 0 && ends_with(name, ".bin") && name.size() == n + 6 + 4 &&
        name.find_first_not_of("0123456789", n) == n + 6)
      return true;
  }
  return name.find(".tmp.") != std::string::npos;  // a file an interrupted writer left
}

// Staging directories of earlier runs whose process is gone (killed mid-prepare; a killed
// run whose parent died too may stay a zombie until init reaps it, and counts as gone).
void remove_dead_staging(const std::string& out_dir) {
  const std::string prefix = staging_prefix(out_dir);
  const std::string parent = prefix.substr(0, prefix.rfind('/'));
  const std::string base = prefix.substr(prefix.rfind('/') + 1);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(base, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + base.size(), nullptr, 10);
    if (pid > 0 && pid <= INT_MAX && process_gone(static_cast<int>(pid))) remove_tree(e.path().string());
  }
}

// For file systems without RENAME_EXCHANGE: out -> out.old, stage -> out, out.old -> stage.
// A crash between the first two renames leaves the old set complete in out.old.
bool swap_by_two_renames(const std::string& stage, const std::string& out) {
  const std::string old = stage + ".old";
  if (::rename(out.c_str(), old.c_str()) != 0) return false;
  if (::rename(stage.c_str(), out.c_str()) != 0) {
    (void)::rename(old.c_str(), out.c_str());
    return false;
  }
  return ::rename(old.c_str(), stage.c_str()) == 0;
}

}  // namespace

void check_prepared_dir(const std::string& dir) {
  const std::string meta_path = dir + "/meta.json";
  struct stat st;
  if (::lstat(meta_path.c_str(), &st) != 0) return;  // shards from elsewhere (llm.c's scripts): nothing to compare with
  check_input_file(meta_path, "prepared data");
  std::ifstream in(meta_path);
  nlohmann::json meta = nlohmann::json::parse(in, nullptr, false);
  RZ_CHECK(!meta.is_discarded() && meta.is_object(), "%s: malformed JSON (re-run `ringzero prepare`)",
           meta_path.c_str());
  for (const char* split : {"train", "val"}) {
    const std::string key = std::string(split) + "_shards";
    std::set<std::string> listed, present;
    uint64_t tokens = 0;
    RZ_CHECK(meta.contains(key), "%s: no '%s' list (not written by `ringzero prepare`?)", meta_path.c_str(),
             key.c_str());
    RZ_CHECK(meta[key].is_array(), "%s: '%s' is not a list of shard file names", meta_path.c_str(), key.c_str());
    for (const auto& n : meta[key]) {
      RZ_CHECK(n.is_string(), "%s: '%s' holds %s, not a shard file name", meta_path.c_str(), key.c_str(),
               n.dump().substr(0, 40).c_str());
      listed.insert(n.get<std::string>());
    }
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(std::string(split) + "_", 0) == 0 && is_prepare_output(name) && name.find(".tmp.") == std::string::npos) {
        present.insert(name);
        if (listed.count(name)) tokens += (static_cast<uint64_t>(e.file_size(ec)) - std::min<uint64_t>(1024, e.file_size(ec))) / 2;
      }
    }
    uint64_t want = 0;
    const std::string count_key = std::string(split) + "_tokens";
    if (meta.contains(count_key)) {
      RZ_CHECK(meta[count_key].is_number_unsigned(), "%s: '%s' is %s, not a token count", meta_path.c_str(),
               count_key.c_str(), meta[count_key].dump().substr(0, 40).c_str());
      want = meta[count_key].get<uint64_t>();
    }
    RZ_CHECK(listed == present && tokens == want,
             "%s: meta.json lists %zu %s shards with %llu tokens, but the directory holds %zu with %llu: a mix of "
             "two `ringzero prepare` runs? Re-run prepare into this directory",
             dir.c_str(), listed.size(), split, static_cast<unsigned long long>(want), present.size(),
             static_cast<unsigned long long>(tokens));
  }
}

namespace {

// opt.out_dir, checked before anything is written: it holds no input and nothing prepare did
// not write; a symbolic link is resolved to the directory it names; created if missing.
std::string checked_out_dir(const PrepareOptions& opt, const std::vector<std::string>& sources) {
  {  // the swap below replaces out_dir whole: it must not hold, or lie inside, an input
    std::vector<RunPath> inputs;
    for (const std::string& in : opt.inputs)
      if (!has_glob_wildcard(in)) inputs.push_back({"the --input", in});
    for (const std::string& f : sources) inputs.push_back({"the --input file", f});
    if (!opt.gpt2_dir.empty()) inputs.push_back({"the --gpt2-dir", opt.gpt2_dir});
    CommandPaths paths;  // nor inside another prepared data directory (data/output_paths.h)
    paths.dirs = {{"--out", opt.out_dir}};
    paths.inputs = std::move(inputs);
    check_outputs(paths);
  }
  // A symbolic link to a directory (a data folder kept elsewhere) stays a link: the new set
  // is built beside the directory it points to and swapped in there.
  std::string out_dir = opt.out_dir;
  if (struct stat lst; ::lstat(out_dir.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    char* real = ::realpath(out_dir.c_str(), nullptr);
    RZ_CHECK(real != nullptr, "--out %s: a symbolic link that does not resolve: %s", opt.out_dir.c_str(),
             errno_string().c_str());
    out_dir = real;
    std::free(real);
  }
  make_dirs(out_dir);
  // Everything is built in a staging directory beside out_dir and swapped in whole at the
  // end, so out_dir holds either the old complete set or the new one, never a mix. A
  // directory with other files in it is not ours to swap.
  {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(out_dir, ec))
      RZ_CHECK(is_prepare_output(e.path().filename().string()),
               "--out %s: holds %s, which prepare did not write; choose an empty or new directory",
               opt.out_dir.c_str(), e.path().filename().c_str());
  }
  return out_dir;
}

// One input file through docs: a document, or with split_fortunes one per fortune.
void encode_file(const std::string& path, bool split_fortunes, DocumentEncoder& docs, PrepareStats& stats,
                 Progress& progress, const SplitWriter& train, const SplitWriter& val) {
  std::vector<char> buf(kChunkBytes);
  std::string line;  // split_fortunes: the current, unfinished line
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  RZ_SYSCHECK(fd, "--input %s: cannot open", path.c_str());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // A fortune ends at a line that is exactly "%"; lines are fed to the document as they end.
  auto on_line = [&](std::string_view l) {
    if (l == "%\n" || l == "%" || l == "%\r\n") docs.end();
    else docs.feed(l.data(), l.size());
  };
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    RZ_SYSCHECK(n, "--input %s: read failed", path.c_str());
    if (n == 0) break;
    // SIGINT/SIGTERM (armed by `ringzero prepare`): stop between chunks; the caller's guard
    // removes the half-built directory, and --out keeps what it held.
    if (const int sig = stop_signal_received(); sig != 0)
      RZ_FAIL("stopped by %s while reading %s; --out is as it was", signal_name(sig).c_str(), path.c_str());
    stats.bytes += static_cast<uint64_t>(n);
    if (!split_fortunes) {
      docs.feed(buf.data(), static_cast<size_t>(n));
    } else {
      std::string_view chunk(buf.data(), static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = chunk.find('\n', start)) != std::string_view::npos; start = nl + 1) {
        if (line.empty()) {
          on_line(chunk.substr(start, nl + 1 - start));
        } else {
          line.append(chunk.substr(start, nl + 1 - start));
          on_line(line);
          line.clear();
        }
      }
      line.append(chunk.substr(start));
      if (line.size() > kChunkBytes) {  // a very long line: pass it on, it cannot be "%"
        docs.feed(line.data(), line.size());
        line.clear();
      }
    }
    progress.update(stats.bytes, train.total() + val.total());
  }
  if (!line.empty()) on_line(line);
  docs.end(!split_fortunes);
}

// stage/tokenizer.bin and stage/meta.json: what the shards were made from and hold.
void write_tokenizer_and_meta(const std::string& stage, const Tokenizer& tok, const PrepareOptions& opt,
                              const PrepareStats& stats) {
  write_llmc_tokenizer(tok, stage + "/tokenizer.bin");
  nlohmann::json meta = {
      {"tokenizer", tok.name()},
      {"vocab_size", tok.vocab_size()},
      {"eot", tok.eot()},
      {"train_tokens", stats.train_tokens},
      {"val_tokens", stats.val_tokens},
      {"train_shards", stats.train_shards},
      {"val_shards", stats.val_shards},
      {"documents", {{"train", stats.train_docs}, {"val", stats.val_docs}, {"empty_skipped", stats.empty_docs}}},
      {"bytes", stats.bytes},
      {"sources", stats.sources},
      {"val_fraction", opt.val_fraction},
      {"seed", opt.seed},
      {"shard_tokens", opt.shard_tokens},
      {"split_fortunes", opt.split_fortunes},
      {"format", "llm.c token shards: 256 x int32 header (20240520, 1, count), uint16 tokens"},
  };
  write_file_atomic(stage + "/meta.json", meta.dump(2) + "\n");
}

}  // namespace

PrepareStats prepare_dataset(const PrepareOptions& opt) {
  RZ_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1, "--val-fraction %g: expected 0 <= F < 1",
           opt.val_fraction);
  RZ_CHECK(opt.shard_tokens >= 1 && opt.shard_tokens <= 0x7FFFFFFFu,
           "--shard-tokens %llu: expected 1 .. 2147483647 (the shard header's count is an int32)",
           static_cast<unsigned long long>(opt.shard_tokens));
  RZ_CHECK(opt.tokenizer == "byte" || opt.tokenizer == "gpt2", "--tokenizer %s: expected byte or gpt2",
           opt.tokenizer.c_str());
  RZ_CHECK(!opt.out_dir.empty(), "--out: an output directory is required");
  std::unique_ptr<Tokenizer> tok = make_tokenizer(opt.tokenizer, opt.gpt2_dir);
  RZ_CHECK(tok->vocab_size() <= 65536, "--tokenizer %s: vocab %d does not fit the shards' uint16 ids",
           opt.tokenizer.c_str(), tok->vocab_size());

  PrepareStats stats;
  stats.sources = expand_inputs(opt.inputs, opt.split_fortunes);
  const std::string out_dir = checked_out_dir(opt, stats.sources);
  remove_dead_staging(out_dir);
  const std::string stage = staging_prefix(out_dir) + std::to_string(::getpid());
  remove_tree(stage);
  make_dirs(stage);
  struct StageGuard {  // an error (or an exception) removes the half-built directory
    std::string dir;
    bool keep = false;
    ~StageGuard() {
      if (!keep) remove_tree(dir);
    }
  } guard{stage};

  SplitWriter train(stage, "train", opt.shard_tokens), val(stage, "val", opt.shard_tokens);
  DocumentEncoder docs(*tok, &train, &val, opt.val_fraction, opt.seed, &stats);
  Progress progress(opt.progress);
  for (const std::string& path : stats.sources)
    encode_file(path, opt.split_fortunes, docs, stats, progress, train, val);
  train.finish();
  val.finish();
  stats.train_tokens = train.total();
  stats.val_tokens = val.total();
  stats.train_shards = train.names();
  stats.val_shards = val.names();
  // No text at all (empty files, or documents that are all empty): an empty set of shards
  // would replace --out's and only fail later, in train.
  RZ_CHECK(stats.train_tokens + stats.val_tokens > 0,
           "--input: no text in %zu file(s) (%llu bytes, %llu empty document(s)): nothing to prepare, %s left as it "
           "was",
           stats.sources.size(), static_cast<unsigned long long>(stats.bytes),
           static_cast<unsigned long long>(stats.empty_docs), opt.out_dir.c_str());
  progress.update(stats.bytes, stats.train_tokens + stats.val_tokens, true);

  write_tokenizer_and_meta(stage, *tok, opt, stats);
  // The swap: renameat2(RENAME_EXCHANGE) trades the two directories in one step; the old set
  // then sits in the staging path and is removed.
  if (::renameat2(AT_FDCWD, stage.c_str(), AT_FDCWD, out_dir.c_str(), RENAME_EXCHANGE) != 0 &&
      !((errno == EINVAL || errno == ENOSYS) && swap_by_two_renames(stage, out_dir))) {
    RZ_FAIL("--out %s: cannot swap in the new shards from %s: %s", opt.out_dir.c_str(), stage.c_str(),
            errno_string().c_str());
  }
  fsync_directory(staging_prefix(out_dir).substr(0, staging_prefix(out_dir).rfind('/')));
  stats.seconds = progress.seconds();
  stats.cpu_seconds = progress.cpu_seconds();
  return stats;
}

}  // namespace rz
