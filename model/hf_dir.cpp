// model/hf_dir.cpp: a Hugging Face model directory's files (see hf_dir.h).
#include "model/hf_dir.h"

#include <sys/stat.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "base/check.h"
#include "base/file.h"
#include "model/json_input.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

using json = nlohmann::json;

// config.json and the index are small; these bounds only stop a hostile one early.
constexpr size_t kMaxConfigBytes = size_t{1} << 20, kMaxIndexBytes = size_t{64} << 20;
constexpr int kMaxJsonDepth = 16;
constexpr size_t kMaxShards = 4096;  // each is an open file while the model is read

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s.size() <= 255 && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

std::map<std::string, std::string> read_weight_map(const std::string& index) {
  return parse_hf_weight_map(read_untrusted_json_file(index, kMaxIndexBytes, kMaxJsonDepth, "index").dump(), index);
}

}  // namespace

json parse_hf_config_json(std::string_view text, const std::string& path) {
  json c = parse_untrusted_json(text, kMaxJsonDepth, "config.json", path);
  RZ_CHECK(c.is_object(), "config.json %s: not a JSON object", path.c_str());
  return c;
}

std::string hf_model_type(const json& c, const std::string& path) {
  const auto t = hf_typed_field<std::string>(c, "model_type", "a string", path);
  RZ_CHECK(t.has_value(), "config.json %s: no model_type (ringzero reads model_type gpt2 or llama)", path.c_str());
  return *t;
}

int hf_int_field(const json& c, const char* key, int fallback, const std::string& path) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  RZ_CHECK(v.is_number_unsigned() && v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= INT_MAX,
           "config.json %s: %s is %s, expected a positive integer", path.c_str(), key,
           printable_name(v.dump().substr(0, 40)).c_str());
  return static_cast<int>(v.get<uint64_t>());
}

template <typename T>
std::optional<T> hf_typed_field(const json& c, const char* key, const char* type, const std::string& path) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  const json& v = c[key];
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean() : std::is_same_v<T, double> ? v.is_number() : v.is_string();
  RZ_CHECK(ok, "config.json %s: %s is %s, expected %s", path.c_str(), key, printable_name(v.dump().substr(0, 40)).c_str(),
           type);
  return v.get<T>();
}
template std::optional<bool> hf_typed_field<bool>(const json&, const char*, const char*, const std::string&);
template std::optional<double> hf_typed_field<double>(const json&, const char*, const char*, const std::string&);
template std::optional<std::string> hf_typed_field<std::string>(const json&, const char*, const char*,
                                                                const std::string&);

std::map<std::string, std::string> parse_hf_weight_map(std::string_view text, const std::string& path) {
  const json j = parse_untrusted_json(text, kMaxJsonDepth, "index", path);
  const char* p = path.c_str();
  RZ_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
           "index %s: no \"weight_map\" object (tensor name -> shard file)", p);
  std::map<std::string, std::string> out;
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    RZ_CHECK(file.is_string(), "index %s: tensor '%s' maps to %s, expected a file name", p, hf_shown(name).c_str(),
             hf_shown(file.dump().substr(0, 40)).c_str());
    const std::string f = file.get<std::string>();
    RZ_CHECK(is_plain_file_name(f),
             "index %s: tensor '%s' maps to '%s', which is not a plain file name inside the directory (no '/', '\\', "
             "'..' or NUL)", p, hf_shown(name).c_str(), hf_shown(f).c_str());
    RZ_CHECK(f != kHfIndexName && f != kHfConfigName, "index %s: tensor '%s' maps to %s, which is not a weight file", p,
             hf_shown(name).c_str(), f.c_str());
    shards.insert(f);
    RZ_CHECK(shards.size() <= kMaxShards, "index %s: more than %zu shard files", p, kMaxShards);
    out[name] = f;
  }
  RZ_CHECK(!out.empty(), "index %s: weight_map is empty", p);
  return out;
}

HfDirFiles list_hf_dir(const std::string& dir) {
  struct stat st {};
  RZ_CHECK(::stat(dir.c_str(), &st) == 0, "hf:%s: cannot open: %s", dir.c_str(), errno_string().c_str());
  RZ_CHECK(S_ISDIR(st.st_mode), "hf:%s: not a directory (hf: names a Hugging Face model directory)", dir.c_str());
  HfDirFiles d;
  d.config_path = (fs::path(dir) / kHfConfigName).string();
  RZ_CHECK(fs::exists(fs::symlink_status(d.config_path)),
           "hf:%s: no config.json in it (not a Hugging Face model directory)", dir.c_str());
  d.config = read_untrusted_json_file(d.config_path, kMaxConfigBytes, kMaxJsonDepth, "config.json");
  RZ_CHECK(d.config.is_object(), "config.json %s: not a JSON object", d.config_path.c_str());
  d.files.push_back(d.config_path);
  const std::string single = (fs::path(dir) / kHfWeightsName).string(), index = (fs::path(dir) / kHfIndexName).string();
  if (fs::exists(fs::symlink_status(single))) {  // transformers prefers it over an index too
    d.weight_files.push_back(single);
  } else if (fs::exists(fs::symlink_status(index))) {
    std::set<std::string> shards;
    for (const auto& [name, file] : read_weight_map(index)) shards.insert(file);
    d.files.push_back(index);
    for (const std::string& s : shards) d.weight_files.push_back((fs::path(dir) / s).string());
  } else {
    const bool pickle = fs::exists(fs::path(dir) / "pytorch_model.bin");
    RZ_FAIL("hf:%s: neither %s nor %s in it%s", dir.c_str(), kHfWeightsName, kHfIndexName,
            pickle ? " (its pytorch_model.bin is a Python pickle, which ringzero does not read: save the model with "
                     "safe_serialization, or convert it with the safetensors package)"
                   : "");
  }
  for (const std::string& w : d.weight_files) d.files.push_back(w);
  return d;
}

HfWeights open_hf_weights(const HfDirFiles& d, const std::string& dir, const std::string& prefix) {
  HfWeights w;
  std::map<std::string, std::string> weight_map;  // sharded: tensor -> shard name
  const bool sharded = d.weight_files.size() != 1 || fs::path(d.weight_files[0]).filename() != kHfWeightsName;
  if (sharded) weight_map = read_weight_map((fs::path(dir) / kHfIndexName).string());
  auto strip = [&](const std::string& n) {
    return !prefix.empty() && n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n;
  };
  std::map<std::string, std::string> seen_in;  // name without prefix -> the file it came from
  for (const std::string& path : d.weight_files) {
    w.files.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile& f = *w.files.back();
    const std::string base = fs::path(path).filename().string();
    for (const SafeTensorInfo& t : f.tensors()) {
      if (sharded) {
        const auto it = weight_map.find(t.name);
        RZ_CHECK(it != weight_map.end(), "%s: tensor '%s' is in shard %s, but %s does not list it", dir.c_str(),
                 hf_shown(t.name).c_str(), base.c_str(), kHfIndexName);
        RZ_CHECK(it->second == base, "%s: tensor '%s' is in shard %s, but %s maps it to %s", dir.c_str(),
                 hf_shown(t.name).c_str(), base.c_str(), kHfIndexName, hf_shown(it->second).c_str());
      }
      const std::string name = strip(t.name);
      const auto [it, fresh] = seen_in.emplace(name, path);
      RZ_CHECK(fresh, "%s: tensor '%s' appears twice (in %s and %s%s)", dir.c_str(), hf_shown(name).c_str(),
               it->second.c_str(), path.c_str(),
               prefix.empty() ? "" : strfmt(", with or without the '%s' prefix", prefix.c_str()).c_str());
      w.by_name[name] = {&f, &t};
    }
  }
  for (const auto& [name, shard] : weight_map) {
    const auto it = w.by_name.find(strip(name));
    RZ_CHECK(it != w.by_name.end() && it->second.info->name == name, "%s: %s maps tensor '%s' to %s, which does not hold it",
             dir.c_str(), kHfIndexName, hf_shown(name).c_str(), hf_shown(shard).c_str());
  }
  return w;
}

void prepare_hf_out_dir(const std::string& dir, bool overwrite) {
  const fs::file_status st = fs::symlink_status(dir);
  if (!fs::exists(st)) {
    fs::create_directories(dir);
    return;
  }
  RZ_CHECK(fs::is_directory(st), "hf:%s: exists and is %s, not a directory", dir.c_str(),
           non_regular_kind(dir).empty() ? "a file" : non_regular_kind(dir).c_str());
  if (fs::is_empty(dir)) return;
  RZ_CHECK(overwrite, "hf:%s: exists and is not empty (--overwrite replaces its model files)", dir.c_str());
  const std::string index = (fs::path(dir) / kHfIndexName).string();
  if (!fs::is_regular_file(fs::symlink_status(index))) return;
  std::map<std::string, std::string> old;
  try {
    old = read_weight_map(index);
  } catch (const Error&) {
    // unreadable: only the index itself goes
  }
  for (const auto& [name, shard] : old) {
    const fs::path s = fs::path(dir) / shard;
    if (fs::is_regular_file(fs::symlink_status(s))) fs::remove(s);
  }
  fs::remove(index);
}

}  // namespace rz
