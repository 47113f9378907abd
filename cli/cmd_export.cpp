// cli/cmd_export.cpp: `ringzero export`, a model from one format into another.
//
//   --model SRC   an llm.c .bin, a checkpoint directory or hf:DIR (train/model_source.h)
//   --to DEST     hf:DIR (config.json + model.safetensors that transformers'
//                 GPT2LMHeadModel or LlamaForCausalLM.from_pretrained loads, by the model's
//                 family) or a path: an llm.c model file (GPT-2 only)
// The weights go through fp32 in ringzero's layout (one full copy in memory: 4 bytes per
// parameter), and out in --dtype. Outputs never replace an input or a non-regular file, and an
// existing output (a non-empty directory, a file) is replaced only with --overwrite; each file
// is written to a temporary name, fsync'd and renamed (base/file.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "data/output_paths.h"
#include "model/hf_model.h"
#include "model/layout.h"
#include "model/llmc_file.h"
#include "train/model_source.h"

namespace fs = std::filesystem;

namespace rz {
namespace {

int run_export(int argc, char** argv) {
  std::string model, to, dtype_name = "fp32";
  bool overwrite = false;
  CLI::App app{
      "Convert a model: read --model, write --to. hf:DIR writes a Hugging Face directory of the\n"
      "model's family (config.json + model.safetensors; the vocabulary's padding rows dropped):\n"
      "GPT-2 as GPT2LMHeadModel (transformer.* names, Conv1D weights, no lm_head: tied to wte),\n"
      "Llama as LlamaForCausalLM (model.layers.N.* names, lm_head when untied); transformers'\n"
      "from_pretrained loads either. Any other path writes an llm.c model file (version 3 fp32,\n"
      "5 bf16), which holds GPT-2 only.",
      "ringzero export"};
  app.add_option("--model", model, std::string("the model to read: ") + kModelSourceHelp)->required();
  app.add_option("--to", to, "hf:DIR (a Hugging Face directory of the model's family) or PATH (an llm.c model .bin, GPT-2 only)")->required();
  app.add_option("--dtype", dtype_name, "the written weights' dtype: fp32 or bf16 (rounded to nearest even)")
      ->capture_default_str();
  app.add_flag("--overwrite", overwrite,
               "replace an existing output: an llm.c file, or a non-empty hf: directory's model files (config.json, "
               "model.safetensors, a sharded index and its shards; other files stay)");
  if (!parse_command_line(app, argc, argv)) return 0;
  RZ_CHECK(dtype_name == "fp32" || dtype_name == "bf16", "--dtype: expected fp32 or bf16, found '%s'", dtype_name.c_str());
  const Precision dtype = parse_precision(dtype_name);
  const ModelSource src = parse_model_source(model);
  const bool hf = to.rfind("hf:", 0) == 0;
  const std::string out = hf ? to.substr(3) : to;
  RZ_CHECK(!out.empty(), "--to: expected hf:DIR or a file path, found '%s'", to.c_str());

  // Nothing is read or written before the outputs are known not to replace an input.
  std::vector<RunPath> files, dirs;
  if (hf) {
    dirs.push_back({"--to", out});
    files.push_back({"--to", (fs::path(out) / "config.json").string()});
    files.push_back({"--to", (fs::path(out) / "model.safetensors").string()});
  } else {
    files.push_back({"--to", out});
    RZ_CHECK(overwrite || !fs::exists(fs::symlink_status(out)) || is_dev_null(out),
             "--to: %s exists (--overwrite replaces it)", out.c_str());
  }
  // The one output check every subcommand uses (data/output_paths.h): besides base/file.h's
  // rules, an export never lands inside a prepared data directory.
  check_outputs(CommandPaths{files, dirs, {}, model_source_inputs(src, "the --model"), {}});

  GPT2Config cfg = read_model_source_config(src);
  RZ_CHECK(hf || cfg.family == ModelFamily::gpt2,
           "--to: %s is an llm.c model file, which holds GPT-2 only, and %s is of the %s family: write hf:DIR",
           out.c_str(), model.c_str(), family_name(cfg.family));
  const std::vector<float> params = read_model_source_params(src, &cfg);
  if (hf) write_hf_model(out, cfg, dtype, params.data(), overwrite);
  else write_model_file(out, cfg, dtype, params.data());
  std::printf("exported %s (%s, %zu parameters) to %s (%s, %s)\n", model.c_str(), describe_shape(cfg).c_str(),
              num_parameters(cfg), to.c_str(), hf ? "config.json + model.safetensors" : "llm.c model file",
              precision_name(dtype));
  return 0;
}

const RegisterCommand kRegister{Command{"export", "convert a model: llm.c .bin, checkpoint or hf:DIR to hf:DIR or .bin",
                                        run_export, 62}};

}  // namespace
}  // namespace rz
