// train/checkpoint.cpp: the checkpoint container (see checkpoint.h for the layout).
#include "train/checkpoint.h"


#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"
#include "base/printable.h"
#include "model/layout.h"
#include "model/llmc_file.h"
#include "model/saved_model.h"

namespace fs = std::filesystem;

namespace rz {
namespace {
// A model file a checkpoint may hold (model/saved_model.h), of either family.
bool model_file_name(const std::string& name) {
  const auto& all = all_saved_model_files();
  return std::find(all.begin(), all.end(), name) != all.end();
}
}  // namespace

namespace {

constexpr uint64_t kRankStateMagic = 0x3145544154535a52ull;  // "RZSTATE1" little-endian
constexpr uint64_t kRankStateVersion = 1;
constexpr size_t kHeaderWords = 16;
constexpr size_t kChecksumWord = 12;
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv_update(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace

uint64_t file_fnv64(const std::string& path) {
  check_input_file(path, "checkpoint file");
  std::ifstream in(path, std::ios::binary);
  RZ_CHECK(in.good(), "%s: cannot open checkpoint file", path.c_str());
  std::vector<char> buf(1 << 16);
  uint64_t h = kFnvOffset;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = fnv_update(h, buf.data(), static_cast<size_t>(in.gcount()));
  }
  return h;
}

std::string checkpoint_dir_name(const std::string& save_dir, uint64_t step) {
  return (fs::path(save_dir) / strfmt("step_%08llu", static_cast<unsigned long long>(step))).string();
}

std::string rank_state_name(int rank) { return strfmt("rank_%05d.state", rank); }

uint64_t RankState::nfloats() const {
  uint64_t n = 0;
  for (const auto& [b, e] : ranges) n += e - b;
  return n;
}

namespace {

// An open file read with pread (positioned reads: the loader seeks to each range).
class ReadFile {
 public:
  ReadFile(const std::string& path, const char* what) : path_(path) {
    fd_ = open_input_file(path, what);  // a FIFO or directory planted there: refused, never blocks
    struct stat st;
    RZ_CHECK(::fstat(fd_, &st) == 0, "%s: cannot stat %s: %s", path.c_str(), what, std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ReadFile() { ::close(fd_); }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  uint64_t size() const { return size_; }
  void read_at(uint64_t offset, void* dst, size_t bytes) const {
    char* p = static_cast<char*>(dst);
    while (bytes > 0) {
      const ssize_t r = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      RZ_CHECK(r > 0, "%s: short read at byte %llu (the file changed or is truncated)", path_.c_str(),
               static_cast<unsigned long long>(offset));
      p += r;
      offset += static_cast<uint64_t>(r);
      bytes -= static_cast<size_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

constexpr size_t kStreamBytes = size_t{1} << 16;  // checksum streaming buffer

uint64_t state_data_offset(uint64_t nranges) { return kHeaderWords * 8 + nranges * 16; }

}  // namespace

void write_rank_state(const std::string& path, const RankState& s, const StateSource& source) {
  const uint64_t nfloats = s.nfloats();
  uint64_t header[kHeaderWords] = {kRankStateMagic, kRankStateVersion, static_cast<uint64_t>(s.rank),
                                   static_cast<uint64_t>(s.world), s.step, s.optimizer_step,
                                   s.layout_total, s.ranges.size(), nfloats, s.loader_epoch,
                                   s.loader_next_window, s.rng_state, 0, 0, 0, 0};
  AtomicFile f(path);
  uint64_t h = kFnvOffset;
  auto put = [&](const void* p, size_t bytes) {
    f.write(p, bytes);
    h = fnv_update(h, p, bytes);
  };
  put(header, sizeof(header));
  std::vector<uint64_t> ranges;
  ranges.reserve(2 * s.ranges.size());
  for (const auto& [b, e] : s.ranges) {
    RZ_CHECK(b <= e, "%s: range [%llu, %llu) ends before it begins", path.c_str(), static_cast<unsigned long long>(b), static_cast<unsigned long long>(e));
    ranges.push_back(b);
    ranges.push_back(e);
  }
  put(ranges.data(), ranges.size() * 8);
  // Master's chunks, then m's, then v's, nfloats values each.
  int array = 0;
  uint64_t got = 0;
  source([&](int a, const float* data, size_t n) {
    if (a != array) {
      RZ_CHECK(a > array && got == nfloats && (a == array + 1 || nfloats == 0),
               "%s: optimizer state array %d after %llu of %llu values of array %d", path.c_str(), a,
               static_cast<unsigned long long>(got), static_cast<unsigned long long>(nfloats), array);
      array = a;
      got = 0;
    }
    RZ_CHECK(got + n <= nfloats, "%s: more optimizer state than the ranges hold (%llu)", path.c_str(),
             static_cast<unsigned long long>(nfloats));
    put(data, n * sizeof(float));
    got += n;
  });
  RZ_CHECK(nfloats == 0 || (array == kStateV && got == nfloats),
           "%s: optimizer state ended at array %d after %llu of %llu values", path.c_str(), array,
           static_cast<unsigned long long>(got), static_cast<unsigned long long>(nfloats));
  header[kChecksumWord] = h;  // FNV-1a of the file with this word zero, as it was hashed
  f.seek(0);
  f.write(header, sizeof(header));
  f.commit();
}

void write_rank_state(const std::string& path, const RankState& s) {
  const uint64_t nfloats = s.nfloats();
  RZ_ENFORCE_EQ(s.master.size(), nfloats);
  RZ_ENFORCE_EQ(s.m.size(), nfloats);
  RZ_ENFORCE_EQ(s.v.size(), nfloats);
  write_rank_state(path, s, [&](const StateChunkSink& emit) {
    emit(kStateMaster, s.master.data(), s.master.size());
    emit(kStateM, s.m.data(), s.m.size());
    emit(kStateV, s.v.data(), s.v.size());
  });
}

RankState read_rank_state_header(const std::string& path) {
  ReadFile in(path, "rank state file");
  const uint64_t size = in.size();
  uint64_t h[kHeaderWords];
  RZ_CHECK(size >= sizeof(h), "%s: truncated rank state (%llu bytes, header needs %zu)", path.c_str(),
           static_cast<unsigned long long>(size), sizeof(h));
  in.read_at(0, h, sizeof(h));
  RZ_CHECK(h[0] == kRankStateMagic, "%s: not a ringzero rank state file (bad magic)", path.c_str());
  RZ_CHECK(h[1] == kRankStateVersion, "%s: rank state version %llu, expected %llu", path.c_str(),
           static_cast<unsigned long long>(h[1]), static_cast<unsigned long long>(kRankStateVersion));
  const uint64_t nranges = h[7], nfloats = h[8];
  // Check the sizes before allocating anything they imply.
  RZ_CHECK(nranges < (1ull << 32) && nfloats < (1ull << 40) &&
               size == sizeof(h) + nranges * 16 + nfloats * 12,
           "%s: truncated or corrupted rank state (size %llu does not match its header: %llu ranges, "
           "%llu floats)",
           path.c_str(), static_cast<unsigned long long>(size), static_cast<unsigned long long>(nranges),
           static_cast<unsigned long long>(nfloats));
  // The checksum, streaming: the header with its checksum word zero, then the rest.
  const uint64_t want = h[kChecksumWord];
  uint64_t zeroed[kHeaderWords];
  std::memcpy(zeroed, h, sizeof(h));
  zeroed[kChecksumWord] = 0;
  uint64_t sum = fnv_update(kFnvOffset, zeroed, sizeof(zeroed));
  {
    std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(kStreamBytes, size - sizeof(h))));
    for (uint64_t off = sizeof(h); off < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
      in.read_at(off, buf.data(), n);
      sum = fnv_update(sum, buf.data(), n);
      off += n;
    }
  }
  RZ_CHECK(sum == want, "%s: checksum mismatch (the file is corrupted)", path.c_str());

  RankState s;
  s.rank = static_cast<int>(h[2]);
  s.world = static_cast<int>(h[3]);
  s.step = h[4];
  s.optimizer_step = h[5];
  s.layout_total = h[6];
  s.loader_epoch = h[9];
  s.loader_next_window = h[10];
  s.rng_state = h[11];
  std::vector<uint64_t> raw(2 * nranges);
  in.read_at(sizeof(h), raw.data(), raw.size() * 8);
  uint64_t covered = 0;
  for (uint64_t i = 0; i < nranges; ++i) {
    const uint64_t b = raw[2 * i], e = raw[2 * i + 1];
    RZ_CHECK(b <= e && e <= s.layout_total, "%s: range %llu [%llu, %llu) outside the layout (%llu)",
             path.c_str(), static_cast<unsigned long long>(i), static_cast<unsigned long long>(b),
             static_cast<unsigned long long>(e), static_cast<unsigned long long>(s.layout_total));
    s.ranges.emplace_back(b, e);
    covered += e - b;
  }
  RZ_CHECK(covered == nfloats, "%s: ranges cover %llu elements but the file holds %llu", path.c_str(),
           static_cast<unsigned long long>(covered), static_cast<unsigned long long>(nfloats));
  return s;
}

RankState read_rank_state(const std::string& path) {
  RankState s = read_rank_state_header(path);
  const uint64_t nfloats = s.nfloats();
  ReadFile in(path, "rank state file");
  RZ_CHECK(in.size() == state_data_offset(s.ranges.size()) + nfloats * 12, "%s: changed while being read",
           path.c_str());
  uint64_t off = state_data_offset(s.ranges.size());
  for (auto* arr : {&s.master, &s.m, &s.v}) {
    arr->resize(nfloats);
    in.read_at(off, arr->data(), nfloats * sizeof(float));
    off += nfloats * sizeof(float);
  }
  return s;
}

void write_manifest(const std::string& dir, uint64_t step, int world, const std::string& strategy,
                    const std::string& precision) {
  nlohmann::json j;
  j["format"] = "ringzero-checkpoint";
  j["version"] = 1;
  j["step"] = step;
  j["world"] = world;
  j["strategy"] = strategy;
  j["precision"] = precision;
  // The model's files, whichever its family writes (model/saved_model.h), then the rank files.
  std::vector<std::string> names;
  for (const std::string& m : all_saved_model_files())
    if (fs::exists(fs::symlink_status(fs::path(dir) / m))) names.push_back(m);
  RZ_CHECK(!names.empty(), "%s: no model file (model.bin, or config.json + model.safetensors) after the save barrier",
           dir.c_str());
  for (int r = 0; r < world; ++r) names.push_back(rank_state_name(r));
  nlohmann::json files = nlohmann::json::object();
  for (const auto& n : names) {
    const std::string p = (fs::path(dir) / n).string();
    RZ_CHECK(fs::exists(p), "%s: missing after the save barrier", p.c_str());
    files[n] = {{"bytes", fs::file_size(p)}, {"fnv64", strfmt("%016llx", static_cast<unsigned long long>(file_fnv64(p)))}};
  }
  j["files"] = files;
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "COMPLETE").string(), text);
}

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "COMPLETE").string();
  check_input_file(path, "checkpoint manifest");
  std::ifstream in(path);
  RZ_CHECK(in.good(), "%s: cannot open checkpoint manifest", path.c_str());
  CheckpointManifest m;
  // nlohmann's get<integer>() casts a floating value ("step": 4e99, found by fuzzing), which
  // is undefined behaviour out of range: integers are read only from JSON integers.
  auto integer = [&path](const nlohmann::json& v, const char* key, uint64_t max) -> uint64_t {
    RZ_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= max, "%s: \"%s\" is not an integer in [0, %llu]",
             path.c_str(), key, static_cast<unsigned long long>(max));
    return v.get<uint64_t>();
  };
  // Each field by name, so a damaged manifest says which one is wrong.
  auto field = [&path](const nlohmann::json& obj, const std::string& where, const char* key) -> const nlohmann::json& {
    RZ_CHECK(obj.is_object() && obj.contains(key), "%s: %sno \"%s\" field", path.c_str(), where.c_str(), key);
    return obj.at(key);
  };
  auto text = [&path](const nlohmann::json& v, const std::string& where, const char* key) {
    RZ_CHECK(v.is_string(), "%s: %s\"%s\" is not a string", path.c_str(), where.c_str(), key);
    return v.get<std::string>();
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    RZ_FAIL("%s: malformed checkpoint manifest (%s)", path.c_str(), e.what());
  }
  RZ_CHECK(j.is_object() && j.contains("format") && j["format"] == "ringzero-checkpoint",
           "%s: not a ringzero checkpoint manifest (no \"format\": \"ringzero-checkpoint\")", path.c_str());
  m.step = integer(field(j, "", "step"), "step", UINT64_MAX);
  m.world = static_cast<int>(integer(field(j, "", "world"), "world", 65536));
  m.strategy = text(field(j, "", "strategy"), "", "strategy");
  m.precision = text(field(j, "", "precision"), "", "precision");
  const nlohmann::json& files = field(j, "", "files");
  RZ_CHECK(files.is_object(), "%s: \"files\" is not an object of name -> {bytes, fnv64}", path.c_str());
  for (auto& [name, f] : files.items()) {
    // Only the names a save writes: a manifest never points outside its directory.
    int r = -1;
    RZ_CHECK(model_file_name(name) || (std::sscanf(name.c_str(), "rank_%5d.state", &r) == 1 && r >= 0 &&
                                       name == rank_state_name(r)),
             "%s: lists \"%s\", which is not a file a checkpoint holds (model.bin, config.json, model.safetensors, "
             "rank_NNNNN.state)", path.c_str(), name.c_str());
    const std::string where = "file \"" + name + "\": ";
    const std::string hex = text(field(f, where, "fnv64"), where, "fnv64");
    RZ_CHECK(hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos,
             "%s: %s\"fnv64\" is not 16 hex digits", path.c_str(), where.c_str());
    m.files.push_back({name, {integer(field(f, where, "bytes"), "bytes", UINT64_MAX), std::stoull(hex, nullptr, 16)}});
  }
  RZ_CHECK(m.world >= 1 && m.world <= 65536, "%s: world %d out of range", path.c_str(), m.world);
  return m;
}

std::optional<uint64_t> parse_step_dir_name(const std::string& name) {
  if (name.size() < 13 || name.rfind("step_", 0) != 0 || name.find_first_not_of("0123456789", 5) != std::string::npos)
    return std::nullopt;
  uint64_t step = 0;
  const auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  if (ec != std::errc() || end != name.data() + name.size()) return std::nullopt;
  // Exactly as checkpoint_dir_name spells it: step_00000002 yes, step_000000002 no.
  if (name != strfmt("step_%08llu", static_cast<unsigned long long>(step))) return std::nullopt;
  return step;
}

namespace {

// Real directories (not links to one) named as checkpoint_dir_name names them, by step.
std::vector<std::pair<uint64_t, std::string>> step_dirs(const std::string& save_dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(save_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(save_dir, ec)) {
    const auto step = parse_step_dir_name(e.path().filename().string());
    std::error_code lec;
    if (step && e.symlink_status(lec).type() == fs::file_type::directory) out.emplace_back(*step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool starts_with_bytes(const fs::path& p, const void* magic, size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::string head(n, '\0');
  return in.read(head.data(), static_cast<std::streamsize>(n)) && std::memcmp(head.data(), magic, n) == 0;
}

// Whether `name` in a step directory is a file save writes: COMPLETE, a model file,
// rank_NNNNN.state, or the temporary "<one of those>.tmp.<pid>" AtomicFile writes first.
// A file under a real name must also be listed in the manifest, or (an interrupted save,
// no manifest) start as its format starts.
// A model file's name, or "rank_NNNNN.state" or "COMPLETE": the names a save writes (no temporary suffix).
bool save_file_name(const std::string& base) {
  int r = 0;
  return base == "COMPLETE" || model_file_name(base) ||
         (base.size() == 16 && std::sscanf(base.c_str(), "rank_%5d.state", &r) == 1 && r >= 0 &&
          base == rank_state_name(r));
}

// "<save file name>.tmp.<pid>": what AtomicFile writes before its rename.
bool save_temporary_name(const std::string& name) {
  const size_t t = name.rfind(".tmp.");
  return t != std::string::npos && t + 5 < name.size() &&
         name.find_first_not_of("0123456789", t + 5) == std::string::npos && save_file_name(name.substr(0, t));
}

bool written_by_save(const fs::path& file, const std::string& name, const std::set<std::string>& listed) {
  if (save_temporary_name(name)) return true;
  const std::string& base = name;
  if (!save_file_name(base)) return false;
  if (base == "COMPLETE" || listed.count(base) > 0) return true;
  if (base == "model.bin") {
    const int32_t magic = kModelMagic;
    return starts_with_bytes(file, &magic, sizeof(magic));
  }
  // The llama family's Hugging Face files: config.json as hf_llama_config_text starts it,
  // model.safetensors with its header's length and then the header's '{'.
  if (base == "config.json") return starts_with_bytes(file, "{\n  \"architectures\"", 19);
  if (base == "model.safetensors") {
    std::ifstream in(file, std::ios::binary);
    char head[9] = {};
    return in.read(head, 9) && head[8] == '{';
  }
  return starts_with_bytes(file, &kRankStateMagic, sizeof(kRankStateMagic));
}

}  // namespace

void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (e.symlink_status(fec).type() == fs::file_type::regular && save_temporary_name(e.path().filename().string()))
      fs::remove(e.path(), fec);
  }
}

std::vector<std::string> remove_checkpoint_dir(const std::string& dir) {
  std::vector<std::string> left;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (ec || st.type() == fs::file_type::not_found) return left;
  if (st.type() != fs::file_type::directory) return {dir + " (not a directory ringzero made)"};
  std::set<std::string> listed;  // the manifest's files, when it reads
  try {
    for (const auto& f : read_manifest(dir).files) listed.insert(f.first);
  } catch (const Error&) {
  }
  // COMPLETE first: a checkpoint half removed is never taken for a complete one.
  const fs::path complete = fs::path(dir) / "COMPLETE";
  if (fs::symlink_status(complete, ec).type() == fs::file_type::regular) fs::remove(complete, ec);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code fec;
    const bool regular = e.symlink_status(fec).type() == fs::file_type::regular;
    if (regular && written_by_save(e.path(), name, listed) && fs::remove(e.path(), fec)) continue;
    left.push_back((fs::path(dir) / name).string());
  }
  std::sort(left.begin(), left.end());
  if (left.empty()) fs::remove(dir, ec);
  return left;
}

std::vector<std::pair<uint64_t, std::string>> list_complete_checkpoints(const std::string& save_dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (auto& [step, dir] : step_dirs(save_dir))
    if (fs::exists(fs::path(dir) / "COMPLETE")) out.emplace_back(step, std::move(dir));
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& save_dir, int keep) {
  std::vector<std::string> left;
  auto take = [&left](std::vector<std::string> v) { left.insert(left.end(), v.begin(), v.end()); };
  auto done = list_complete_checkpoints(save_dir);
  if (done.empty()) return left;
  const uint64_t newest = done.back().first;
  if (keep > 0)
    for (size_t i = 0; i + static_cast<size_t>(keep) < done.size(); ++i) take(remove_checkpoint_dir(done[i].second));
  // Interrupted saves older than the newest complete one can never be resumed from.
  for (const auto& [step, dir] : step_dirs(save_dir))
    if (step < newest && !fs::exists(fs::path(dir) / "COMPLETE")) take(remove_checkpoint_dir(dir));
  return left;
}

namespace {

// The size of a file a save wrote, from lstat: it must be there and be a regular file (not a
// link, which could name /dev/zero; not a FIFO, which nothing here ever opens).
uint64_t checkpoint_file_size(const std::string& path) {
  struct stat st;
  RZ_CHECK(::lstat(path.c_str(), &st) == 0, "%s: missing from the checkpoint (%s)", path.c_str(),
           errno_string().c_str());
  const std::string kind = non_regular_kind(path);
  RZ_CHECK(kind.empty(), "%s: is %s, not a regular file a save wrote", path.c_str(), kind.c_str());
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& dir, uint64_t layout_total) {
  LoadedCheckpoint ck;
  ck.dir = dir;
  ck.manifest = read_manifest(dir);
  ck.step = ck.manifest.step;
  std::set<std::string> listed;
  for (const auto& [name, sz] : ck.manifest.files) {
    const std::string p = (fs::path(dir) / name).string();
    const uint64_t bytes = checkpoint_file_size(p);
    RZ_CHECK(bytes == sz.first, "%s: truncated or replaced (%llu bytes, the manifest says %llu)", p.c_str(),
             static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(sz.first));
    if (model_file_name(name))  // rank files carry their own checksum, checked as they are read
      RZ_CHECK(file_fnv64(p) == sz.second, "%s: checksum mismatch (the file is corrupted)", p.c_str());
    listed.insert(name);
  }
  // Every file a save writes is listed, and each one's size is what its own header and the
  // model's shape say, not only what the manifest says: a manifest rewritten to match a
  // truncated file must not make it "intact".
  std::vector<std::pair<uint64_t, uint64_t>> all;  // every old range, for the coverage check
  for (int r = 0; r < ck.manifest.world; ++r) {
    const std::string p = (fs::path(dir) / rank_state_name(r)).string();
    RZ_CHECK(listed.count(rank_state_name(r)) > 0, "%s: the manifest does not list %s (world %d)", dir.c_str(),
             rank_state_name(r).c_str(), ck.manifest.world);
    checkpoint_file_size(p);
    RankState s = read_rank_state_header(p);  // its size against its header, and its checksum
    RZ_CHECK(s.layout_total == layout_total,
             "%s: written for a model with %llu parameters, this model has %llu", p.c_str(),
             static_cast<unsigned long long>(s.layout_total), static_cast<unsigned long long>(layout_total));
    RZ_CHECK(s.rank == r && s.world == ck.manifest.world && s.step == ck.step,
             "%s: rank %d of %d at step %llu does not match the manifest (rank %d of %d at step %llu)",
             p.c_str(), s.rank, s.world, static_cast<unsigned long long>(s.step), r, ck.manifest.world,
             static_cast<unsigned long long>(ck.step));
    if (r == 0) ck.optimizer_step = s.optimizer_step;
    RZ_CHECK(s.optimizer_step == ck.optimizer_step, "%s: optimizer step %llu differs from rank 0's %llu",
             p.c_str(), static_cast<unsigned long long>(s.optimizer_step),
             static_cast<unsigned long long>(ck.optimizer_step));
    all.insert(all.end(), s.ranges.begin(), s.ranges.end());
    ck.ranks.push_back(std::move(s));
  }
  std::sort(all.begin(), all.end());
  uint64_t reached = 0;  // [0, reached) is covered
  for (const auto& [b, e] : all) {
    if (b > reached) break;
    reached = std::max(reached, e);
  }
  RZ_CHECK(reached >= layout_total, "%s: the rank files leave parameter %lld without optimizer state", dir.c_str(),
           static_cast<long long>(reached));
  // The model (what `sample` reads: model.bin for GPT-2, and llm.c too; config.json +
  // model.safetensors for Llama, and transformers too): every file listed, its size against
  // its own header's shape, and that shape's parameter count against this model's.
  const std::vector<std::string> model_files = saved_model_paths(dir);
  RZ_CHECK(!model_files.empty(), "%s: holds no model (neither model.bin nor config.json)", dir.c_str());
  for (const std::string& f : model_files)
    RZ_CHECK(listed.count(fs::path(f).filename().string()) > 0, "%s: the manifest does not list %s", dir.c_str(),
             fs::path(f).filename().c_str());
  const ModelConfig shape = check_saved_model(dir);  // its errors name the file
  RZ_CHECK(num_parameters(shape) == layout_total, "%s: holds a model of %zu parameters, this model has %llu",
           dir.c_str(), num_parameters(shape), static_cast<unsigned long long>(layout_total));
  return ck;
}

void read_checkpoint_state(const LoadedCheckpoint& ck, const StateTarget& target) {
  RZ_CHECK(target.chunk_elems > 0 && target.put, "read_checkpoint_state: no chunk size or receiver");
  // The target's ranges, sorted, so each old range finds its overlaps by binary search.
  auto sorted = [](std::vector<std::pair<uint64_t, uint64_t>> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto want_master = sorted(target.master_ranges), want_moments = sorted(target.moment_ranges);
  Buffer<float> scratch;
  for (int r = 0; r < static_cast<int>(ck.ranks.size()); ++r) {
    const RankState& s = ck.ranks[static_cast<size_t>(r)];
    const std::string path = (fs::path(ck.dir) / rank_state_name(r)).string();
    ReadFile in(path, "rank state file");
    const uint64_t nfloats = s.nfloats(), data = state_data_offset(s.ranges.size());
    RZ_CHECK(in.size() == data + nfloats * 12, "%s: changed since it was verified", path.c_str());
    for (int array : {kStateMaster, kStateM, kStateV}) {
      const auto& want = array == kStateMaster ? want_master : want_moments;
      uint64_t k = 0;  // index of the range's first value in the file's array
      for (const auto& [b, e] : s.ranges) {
        auto it = std::upper_bound(want.begin(), want.end(), b,
                                   [](uint64_t x, const std::pair<uint64_t, uint64_t>& w) { return x < w.second; });
        for (; it != want.end() && it->first < e; ++it) {
          const uint64_t lo = std::max(b, it->first), hi = std::min(e, it->second);
          for (uint64_t a = lo; a < hi;) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(target.chunk_elems, hi - a));
            if (scratch.size() < n)
              scratch.allocate(MemTag::workspace, static_cast<size_t>(std::min<uint64_t>(target.chunk_elems, hi - lo)));
            in.read_at(data + (static_cast<uint64_t>(array) * nfloats + k + (a - b)) * sizeof(float), scratch.data(),
                       n * sizeof(float));
            target.put(array, a, scratch.data(), n);
            a += n;
          }
        }
        k += e - b;
      }
    }
  }
}

void probe_save_dir(const std::string& save_dir, int rank) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  RZ_CHECK(!ec && fs::is_directory(save_dir), "save_dir: cannot create %s: %s (checked before training, so no "
           "work is lost)", save_dir.c_str(), ec ? ec.message().c_str() : "not a directory");
  const std::string probe = (fs::path(save_dir) / strfmt(".write_probe.%d.%d", rank, static_cast<int>(::getpid()))).string();
  try {
    write_file_atomic(probe, "probe\n");
  } catch (const Error& e) {
    RZ_FAIL("save_dir: %s is not writable (%s); checked before training, so no work is lost", save_dir.c_str(),
            e.what());
  }
  fs::remove(probe, ec);
}

std::vector<std::string> list_step_dirs(const std::string& save_dir) {
  std::vector<std::string> out;
  for (auto& [step, dir] : step_dirs(save_dir)) out.push_back(std::move(dir));
  return out;
}

LoadedCheckpoint load_resume_checkpoint(const std::string& save_dir, uint64_t layout_total, bool newest_intact,
                                        std::string* notes, bool set_aside) {
  const auto done = list_complete_checkpoints(save_dir);
  RZ_CHECK(newest_intact || !done.empty(), "resume: no complete checkpoint in %s", save_dir.c_str());
  std::vector<std::pair<std::string, std::string>> skipped;  // (dir, why), newest first
  for (size_t i = done.size(); i-- > 0;) {
    LoadedCheckpoint ck;
    try {
      ck = load_checkpoint(done[i].second, layout_total);
    } catch (const Error& e) {
      skipped.emplace_back(done[i].second, e.what());
      continue;
    }
    RZ_CHECK(newest_intact || skipped.empty(),
             "resume: the newest checkpoint %s is damaged (%s); the newest intact one is %s (step %llu): "
             "--resume auto takes it", done.back().second.c_str(), skipped.front().second.c_str(), ck.dir.c_str(),
             static_cast<unsigned long long>(ck.step));
    // The damaged ones are newer than the step this run goes on from: left where they are,
    // --keep would count them among the newest and prune the intact ones this run saves,
    // and a file in them that is not a regular file (a FIFO) would refuse the save of their
    // step. Moved aside, whole, under a name that is not a step directory's.
    for (const auto& [dir, why] : skipped) {
      std::string moved;
      if (set_aside) {
        moved = dir + ".damaged";
        if (fs::exists(fs::symlink_status(moved))) moved += strfmt(".%d", static_cast<int>(::getpid()));
        std::error_code ec;
        fs::rename(dir, moved, ec);
        if (ec) moved = "could not move it aside: " + ec.message();
        else moved = "moved aside to " + moved;
      }
      if (notes != nullptr)  // one line each: what was wrong is quoted from files, so escaped
        *notes += strfmt("resume auto: skipped damaged checkpoint %s: %s%s%s%s\n", printable(dir).c_str(),
                         printable(why).c_str(), moved.empty() ? "" : " (", printable(moved).c_str(),
                         moved.empty() ? "" : ")");
    }
    return ck;
  }
  RZ_CHECK(done.empty(), "resume: the newest checkpoint %s is damaged (%s), and no older one is intact",
           done.back().second.c_str(), skipped.front().second.c_str());
  return LoadedCheckpoint{};  // auto, and nothing saved yet: a fresh start
}

}  // namespace rz
