// model/hf_model.cpp: Hugging Face directories by family (see hf_model.h).
#include "model/hf_model.h"

#include "base/check.h"
#include "model/hf_dir.h"
#include "model/hf_gpt2.h"
#include "model/hf_llama.h"
#include "model/layout.h"

namespace rz {

namespace {

// The family a config.json's model_type names.
ModelFamily family_of(const HfDirFiles& f) {
  const std::string type = hf_model_type(f.config, f.config_path);
  if (type == "gpt2") return ModelFamily::gpt2;
  if (type == "llama") return ModelFamily::llama;
  RZ_FAIL("config.json %s: model_type '%s' is not one ringzero reads (gpt2: GPT2LMHeadModel, llama: LlamaForCausalLM)",
          f.config_path.c_str(), hf_shown(type).c_str());
}

}  // namespace

HfModelDir inspect_hf_model(const std::string& dir) {
  HfDirFiles f = list_hf_dir(dir);
  HfModelDir d;
  d.cfg = family_of(f) == ModelFamily::gpt2 ? parse_hf_gpt2_config(f.config.dump(), f.config_path)
                                            : parse_hf_llama_config(f.config.dump(), f.config_path);
  d.files = std::move(f.files);
  d.weight_files = std::move(f.weight_files);
  return d;
}

HfModelDir read_hf_model(const std::string& dir, const ParamChunkSink& sink) {
  const HfDirFiles f = list_hf_dir(dir);
  HfModelDir d;
  if (family_of(f) == ModelFamily::gpt2) {
    const HfGpt2Dir g = read_hf_gpt2(dir, sink);
    d.cfg = g.cfg;
  } else {
    d.cfg = read_hf_llama(dir, f, sink);
  }
  d.files = f.files;
  d.weight_files = f.weight_files;
  return d;
}

void write_hf_model(const std::string& dir, const ModelConfig& cfg_in, Precision dtype, const float* params_internal,
                    bool overwrite) {
  ModelConfig cfg = cfg_in;
  finalize_config(cfg);
  if (cfg.family == ModelFamily::gpt2) {
    write_hf_gpt2(dir, cfg, dtype, params_internal, overwrite);
    return;
  }
  prepare_hf_out_dir(dir, overwrite);
  HfLlamaWriter w(dir, cfg, dtype);
  w.write(0, params_internal, num_parameters(cfg));
  w.commit();
}

}  // namespace rz
