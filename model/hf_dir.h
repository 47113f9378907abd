// model/hf_dir.h: a Hugging Face model directory, whatever model it holds.
//
// A directory holds config.json and either model.safetensors or the sharded form:
// model.safetensors.index.json, whose "weight_map" names each tensor's shard, a plain file
// name inside the directory (transformers prefers model.safetensors when both are there).
// This file finds and checks those files, opens the weights by name, and prepares a
// directory to write into; what the names and config.json mean is a family's
// (model/hf_gpt2.h, model/hf_llama.h), and model/hf_model.h picks the family by config.json's
// model_type. Everything read is untrusted: JSON through model/json_input.h, weights through
// model/safetensors.h, and every defect is one line naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace rz {

inline constexpr const char* kHfConfigName = "config.json";
inline constexpr const char* kHfWeightsName = "model.safetensors";
inline constexpr const char* kHfIndexName = "model.safetensors.index.json";

// The files of a directory (nothing parsed beyond config.json's JSON and the index).
struct HfDirFiles {
  nlohmann::json config;                  // config.json, parsed (bounded, no duplicate keys)
  std::string config_path;
  std::vector<std::string> files;         // every file a read opens, config.json first
  std::vector<std::string> weight_files;  // model.safetensors, or the shards in name order
};
HfDirFiles list_hf_dir(const std::string& dir);

// config.json's text, parsed as list_hf_dir parses it (for the parsers' own entry points).
nlohmann::json parse_hf_config_json(std::string_view text, const std::string& path);

// config.json's model_type ("gpt2", "llama"); an error when absent or not a string.
std::string hf_model_type(const nlohmann::json& config, const std::string& path);

// model.safetensors.index.json's text -> its weight_map (tensor name -> shard file name).
std::map<std::string, std::string> parse_hf_weight_map(std::string_view text, const std::string& path);

// The directory's weight files, opened and checked against the index (every tensor in the
// shard the index names, every listed tensor present, no name twice): name (with `prefix`
// taken off where it starts with it) -> (file, tensor).
struct HfWeights {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  struct Where {
    const SafetensorsFile* file;
    const SafeTensorInfo* info;
  };
  std::map<std::string, Where> by_name;
};
HfWeights open_hf_weights(const HfDirFiles& d, const std::string& dir, const std::string& prefix = "");

// Fields of config.json, read as transformers reads them: absent or null gives `fallback`
// (the config class's default); anything else of the wrong type is an error naming the key.
int hf_int_field(const nlohmann::json& c, const char* key, int fallback, const std::string& path);  // 1 .. INT_MAX
template <typename T>  // bool, double or std::string
std::optional<T> hf_typed_field(const nlohmann::json& c, const char* key, const char* type, const std::string& path);

// Makes `dir` ready for a model's files: created when absent; an empty directory as it is;
// a non-empty one only with overwrite, its old model files removed first (config.json and
// model.safetensors are replaced by the writer; a model.safetensors.index.json and the
// shards it names would shadow or contradict the new file, so they go); other files (a
// tokenizer's) stay.
void prepare_hf_out_dir(const std::string& dir, bool overwrite);

// A name read from a file, quoted for a message (printable_name).
inline std::string hf_shown(const std::string& s) { return printable_name(s); }

}  // namespace rz
