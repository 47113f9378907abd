// train/run_paths.cpp: the inputs and outputs of a training run (see run_paths.h).
#include "train/run_paths.h"

#include <filesystem>
#include <set>

#include "base/check.h"
#include "data/loader.h"
#include "train/checkpoint.h"
#include "train/model_source.h"

namespace fs = std::filesystem;

namespace rz {

std::vector<RunPath> train_inputs(const TrainConfig& cfg) {
  std::vector<RunPath> in;
  if (!cfg.config_path.empty()) in.push_back({"the config file", cfg.config_path});
  std::set<std::string> dirs;  // each shard directory's prepare files, once
  for (const auto& [key, pattern] : {std::pair{"data", cfg.data}, std::pair{"val_data", cfg.val_data}}) {
    if (pattern.empty()) continue;
    std::vector<std::string> files;
    try {
      files = expand_shard_pattern(pattern);
    } catch (const Error&) {
      continue;  // nothing there to protect; the loader names the pattern
    }
    for (const std::string& f : files) {
      in.push_back({strfmt("the %s shard", key), f});
      std::filesystem::path dir = std::filesystem::path(f).parent_path();
      if (dir.empty()) dir = ".";
      if (dirs.insert(dir.string()).second) {
        in.push_back({strfmt("the %s shards' prepare file", key), (dir / "meta.json").string()});
        in.push_back({strfmt("the %s shards' prepare file", key), (dir / "tokenizer.bin").string()});
      }
    }
  }
  for (RunPath& p : model_source_inputs(cfg.init, "the init model")) in.push_back(std::move(p));
  if (!cfg.hellaswag.empty()) in.push_back({"the hellaswag eval file", cfg.hellaswag});
  if (!cfg.tokenizer.empty() && cfg.tokenizer != "byte" && cfg.tokenizer != "gpt2")
    in.push_back({"the tokenizer", cfg.tokenizer});
  if (!cfg.gpt2_dir.empty()) {
    in.push_back({"the gpt2_dir", cfg.gpt2_dir});
    in.push_back({"the gpt2_dir", (std::filesystem::path(cfg.gpt2_dir) / "encoder.json").string()});
    in.push_back({"the gpt2_dir", (std::filesystem::path(cfg.gpt2_dir) / "vocab.bpe").string()});
  }
  return in;
}

CommandPaths train_paths(const TrainConfig& cfg) {
  CommandPaths p;
  p.files = {{"metrics", cfg.metrics}, {"memory_report", cfg.memory_report}, {"trace", cfg.trace}};
  p.dirs = {{"save_dir", cfg.save_dir}, {"tensorboard", cfg.tensorboard}};
  p.record_dirs = {{"flight_dir", cfg.flight_dir}};
  p.inputs = train_inputs(cfg);
  p.shard_patterns = {{"data", cfg.data}, {"val_data", cfg.val_data}};
  return p;
}

void check_train_paths(const TrainConfig& cfg) {
  const CommandPaths paths = train_paths(cfg);
  check_outputs(paths);
  const std::vector<RunPath>& files = paths.files;
  // Nor inside one of save_dir's checkpoints (a resume reads it; pruning deletes it): those
  // directories are the run's own, so they are inputs of this second check only.
  std::vector<RunPath> checkpoints;
  if (!cfg.save_dir.empty())
    for (const std::string& d : list_step_dirs(cfg.save_dir)) checkpoints.push_back({"the checkpoint", d});
  check_run_outputs(files, {{"tensorboard", cfg.tensorboard}}, checkpoints);
  // ... including one a later save will make (save_dir/step_NNNNNNNN/ not there yet).
  if (cfg.save_dir.empty()) return;
  std::error_code ec;
  const fs::path save = fs::weakly_canonical(cfg.save_dir, ec);
  for (const RunPath& f : files) {
    if (f.path.empty()) continue;
    const fs::path parent = fs::weakly_canonical(f.path, ec).parent_path();
    RZ_CHECK(!parse_step_dir_name(parent.filename().string()) || parent.parent_path() != save,
             "%s: %s lies inside a checkpoint directory of save_dir %s, which saves write and pruning deletes; "
             "write it elsewhere", f.what.c_str(), f.path.c_str(), cfg.save_dir.c_str());
  }
  // The same for the tensorboard directory itself and anywhere below a checkpoint's.
  if (!cfg.tensorboard.empty())
    for (fs::path d = fs::weakly_canonical(cfg.tensorboard, ec); d.has_parent_path() && d != d.parent_path();
         d = d.parent_path())
      RZ_CHECK(!parse_step_dir_name(d.filename().string()) || d.parent_path() != save,
               "tensorboard: %s lies inside a checkpoint directory of save_dir %s, which saves write and pruning "
               "deletes; write it elsewhere", cfg.tensorboard.c_str(), cfg.save_dir.c_str());
}

}  // namespace rz
