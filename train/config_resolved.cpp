// train/config_resolved.cpp: the automatic keys as a run resolved them (config_resolved.h).
#include "train/config_resolved.h"

#include <tuple>

#include "base/check.h"
#include "comm/options.h"

namespace rz {

std::map<std::string, std::string> resolved_settings(const TrainConfig& cfg, const RunFacts& run) {
  std::map<std::string, std::string> r;
  const GPT2Config& m = run.model;
  const char* shape_from = !cfg.init.empty() ? "from the --init model" : "the preset's";
  for (auto [key, given, value] : {std::tuple{"layers", cfg.layers, m.num_layers}, {"channels", cfg.channels, m.channels},
                                   {"heads", cfg.heads, m.num_heads}, {"max_seq", cfg.max_seq, m.max_seq_len}})
    if (given == 0) r[key] = strfmt("%d (%s)", value, shape_from);
  if (cfg.family == "auto") r["family"] = strfmt("%s (%s)", family_name(m.family), shape_from);
  // The keys only some families have: what this one made of them, or that it has none.
  const FamilyTraits& tr = family_traits(m.family);
  const char* none = "- (the family has none)";
  if (cfg.kv_heads == 0)
    r["kv_heads"] = tr.grouped_kv ? strfmt("%d (%s)", m.num_kv_heads, shape_from) : strfmt("%d (= heads)", m.num_kv_heads);
  if (cfg.intermediate == 0)
    r["intermediate"] = tr.mlp == MlpKind::gelu ? strfmt("%d (4 x channels)", m.intermediate)
                                                : strfmt("%d (%s)", m.intermediate, shape_from);
  if (cfg.rope_theta == 0)
    r["rope_theta"] = tr.position == PositionKind::rope ? strfmt("%g (%s)", m.rope_theta, shape_from) : std::string(none);
  if (cfg.norm_eps == 0)
    r["norm_eps"] = tr.norm == NormKind::rmsnorm ? strfmt("%g (%s)", m.norm_eps, shape_from)
                                                 : strfmt("%g (layernorm's)", m.norm_eps);
  if (cfg.classifier == "auto") r["classifier"] = strfmt("%s (%s)", m.tied ? "tied" : "untied", shape_from);
  if (cfg.vocab == 0) {
    const char* from = !cfg.init.empty()        ? "from the --init model"
                       : !run.have_tokenizer    ? "the preset's"
                       : cfg.tokenizer.empty()  ? "from the data's tokenizer.bin"
                                                : "from the tokenizer";
    r["vocab"] = strfmt("%d (%s)", m.vocab_size, from);
  }
  if (cfg.tokenizer.empty())
    r["tokenizer"] = run.tokenizer_beside.empty() ? std::string("- (no tokenizer.bin beside the data)")
                                                  : run.tokenizer_beside + " (beside the data)";
  if (cfg.threads == 0)
    r["threads"] = strfmt("%d (auto: %s)", run.omp_threads, run.omp_env ? "OMP_NUM_THREADS" : "OpenMP's default");
  if (cfg.total_batch_tokens == 0)
    r["total_batch_tokens"] = strfmt("%lld (B*T*ranks = %d*%d*%d, no accumulation)",
                                     static_cast<long long>(cfg.batch) * cfg.seq * run.world, cfg.batch, cfg.seq, run.world);
  if (cfg.device.kind != DeviceKind::cpu && !cfg.device.has_index())
    r["device"] = device_name(run.device) + " (rank 0's: LOCAL_RANK mod the visible devices)";
  if (cfg.master_port == 0)
    r["master_port"] = run.world > 1 ? strfmt("%d (picked free)", run.master_port) : std::string("- (one rank, no rendezvous)");
  if (cfg.comm == CommBackend::ring && cfg.transport == CommTransport::automatic)
    r["transport"] = run.transport + " (auto)";
  if (cfg.grad_reduce_dtype == "auto")
    r["grad_reduce_dtype"] = strfmt("%s (auto: the precision's)", precision_name(run.precision));
  if (cfg.flight_dir.empty() && cfg.flight_entries > 0) r["flight_dir"] = run.flight_dir + " (auto)";
  return r;
}

}  // namespace rz
