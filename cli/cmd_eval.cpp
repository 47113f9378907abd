// cli/cmd_eval.cpp: `ringzero eval`, a model scored as GPT-2 reproductions report it.
//
//   --hellaswag FILE   llm.c's eval file (hellaswag_val.bin): acc and acc_norm in llm.c's
//                      completion style (train/hellaswag.h)
//   --val-data PATTERN validation shards: the loss, and bits per byte where the tokenizer gives
//                      each token's bytes (train/val_loss.h)
// With --nproc-per-node N (CPU ranks) ringzero starts N ranks itself, as `train` does; rank r
// scores examples r, r + N, ... and the windows the loader gives it, and the sums are reduced
// over the ring. Rank 0 prints the result (one JSON object with --json).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/checked.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "data/eval_file.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/gpt2.h"
#include "train/config.h"
#include "train/hellaswag.h"
#include "train/model_source.h"
#include "train/rank_setup.h"
#include "train/val_loss.h"
#include "zero/host_collectives.h"

#include <omp.h>

namespace fs = std::filesystem;

namespace rz {
namespace {

struct EvalArgs {
  std::string model, val_data, hellaswag;
  TrainConfig settings;  // rows of train's table: tokenizer, gpt2_dir, precision, device, threads, nproc_per_node
  size_t limit = 0;
  int batch = 16, seq = 0, batches = 0;
  bool json = false;
};

// --tokenizer, else the tokenizer.bin `ringzero prepare` wrote beside the validation shards.
std::unique_ptr<Tokenizer> eval_tokenizer(const EvalArgs& a, std::string* why_none) {
  if (!a.settings.tokenizer.empty()) return make_tokenizer(a.settings.tokenizer, a.settings.gpt2_dir);
  const std::string first = a.val_data.substr(0, a.val_data.find(','));
  fs::path dir = fs::path(first).parent_path();
  if (dir.empty()) dir = ".";
  if (fs::exists(dir / "tokenizer.bin")) return load_llmc_tokenizer((dir / "tokenizer.bin").string());
  *why_none = "no tokenizer to count the tokens' bytes: give --tokenizer, or keep prepare's tokenizer.bin beside the shards";
  return nullptr;
}

int run_eval(int argc, char** argv) {
  EvalArgs a;
  CLI::App app{
      "Evaluate a model: HellaSwag acc / acc_norm in llm.c's completion style (--hellaswag: each\n"
      "ending scored by its loss given the context; acc takes the least summed loss, acc_norm the\n"
      "least mean loss) and the validation loss with its bits per byte (--val-data). llm.c reports\n"
      "acc_norm 0.2955 (acc 0.2859) on hellaswag_val.bin for OpenAI's GPT-2 124M: with those weights\n"
      "(hf:DIR of openai-community/gpt2) and that file this must print the same (not checked here, no\n"
      "download being possible where it was built; docs/interop.md says what was).",
      "ringzero eval"};
  app.add_option("--model", a.model, std::string("the model: ") + kModelSourceHelp)->required();
  app.add_option("--hellaswag", a.hellaswag,
                 "llm.c's eval file (hellaswag_val.bin; token ids of the model's tokenizer): each row (context + "
                 "ending) must fit in the model's maxT");
  add_number(app, "--limit", a.limit, "score only the first N examples of --hellaswag (0: all)")->capture_default_str();
  add_setting_flags(app, a.settings, {"val_data"});  // llm.c .bin files: a glob or comma list
  add_number(app, "--batch", a.batch, "rows per forward: HellaSwag endings, or validation sequences B")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  add_number(app, "--seq", a.seq, "validation sequence length T (0: the model's maxT)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  add_number(app, "--batches", a.batches, "validation batches per rank (0: every full batch of the shards)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  add_setting_flags(app, a.settings, {"tokenizer", "gpt2_dir", "precision", "device", "threads", "nproc_per_node"});
  app.add_flag("--json", a.json, "print the result as one JSON object");
  if (!parse_command_line(app, argc, argv)) return 0;
  const TrainConfig& s = a.settings;
  a.val_data = s.val_data;
  RZ_CHECK(!a.hellaswag.empty() || !a.val_data.empty(), "eval: nothing to evaluate (give --hellaswag and/or --val-data)");
  RZ_CHECK(app.count("--limit") == 0 || !a.hellaswag.empty(), "--limit: does nothing without --hellaswag");
  for (const char* flag : {"--seq", "--batches", "--tokenizer", "--gpt2-dir"})
    RZ_CHECK(app.count(flag) == 0 || !a.val_data.empty(), "%s: does nothing without --val-data", flag);
  RZ_CHECK(s.nproc_per_node == 1 || s.device.kind == DeviceKind::cpu,
           "--nproc-per-node %d: eval runs several ranks on CPU ranks only (device %s: one rank)", s.nproc_per_node,
           device_spec_name(s.device).c_str());
  RankLaunch job;
  job.nproc_per_node = s.nproc_per_node;
  if (should_launch(job)) return launch_ranks(job, std::vector<std::string>(argv, argv + argc));
  const RankEnv env = rank_env_from_environment();
  if (s.threads > 0) omp_set_num_threads(s.threads);

  // Every user file is read before the ranks meet, so a bad one fails on every rank at once.
  const ModelSource source = parse_model_source(a.model);
  GPT2Config cfg = read_model_source_config(source);
  std::optional<EvalFile> hellaswag;
  if (!a.hellaswag.empty()) {
    hellaswag = read_eval_file(a.hellaswag);
    check_eval_fits(*hellaswag, cfg, 0, a.hellaswag, "the model's maxT");
  }
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<DataLoader> val;
  std::string no_bpb;
  const int T = a.seq > 0 ? a.seq : cfg.max_seq_len;
  if (!a.val_data.empty()) {
    RZ_CHECK(T <= cfg.max_seq_len, "--seq %d: the model has only %d positions (maxT)", T, cfg.max_seq_len);
    checked_mul<int64_t>(a.batch, T, "--batch x --seq");
    tok = eval_tokenizer(a, &no_bpb);
    RZ_CHECK(tok == nullptr || tok->vocab_size() <= cfg.vocab_size,
             "--tokenizer has %d tokens but the model %s only %d: they do not belong together", tok->vocab_size(),
             a.model.c_str(), cfg.vocab_size);
    val = std::make_unique<DataLoader>(a.val_data, a.batch, T, env.rank, env.world_size, 0, false);
    val->set_vocab_bound(cfg.vocab_size);
  }
  ModelOptions mo;
  mo.precision = s.precision();
  const RankPlacement at = place_rank(s.device, env, CommBackend::ring);
  mo.device = at.device;
  mo.backend = at.backend;
  GPT2 model(cfg, mo);
  read_model_source(source, [&](size_t begin, const float* p, size_t n) { model.set_params_f32(begin, n, p); });
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<HostCollectives> hc;
  if (env.world_size > 1) {
    comm = connect_rank(env, at, CommOptions{});
    hc = std::make_unique<HostCollectives>(*comm, model.backend());
  }
  auto sum_over_ranks = [&](std::vector<float> v) {
    if (hc) hc->all_reduce(v.data(), v.size(), ReduceOp::sum);
    return v;
  };

  nlohmann::json out;
  out["model"] = a.model;
  out["ranks"] = env.world_size;
  std::vector<std::string> lines;
  if (hellaswag) {
    ChoiceEvalOptions o;
    o.rank = env.rank;
    o.world = env.world_size;
    o.limit = a.limit;
    o.rows = a.batch;
    const ChoiceCounts c = score_choices(model, *hellaswag, o);
    const std::vector<float> v = sum_over_ranks({static_cast<float>(c.examples), static_cast<float>(c.correct),
                                                 static_cast<float>(c.correct_norm)});
    const double n = v[0], acc = n > 0 ? v[1] / n : 0.0, acc_norm = n > 0 ? v[2] / n : 0.0;
    out["hellaswag"] = {{"file", a.hellaswag}, {"examples", static_cast<int64_t>(v[0])}, {"acc", acc},
                        {"acc_norm", acc_norm}};
    lines.push_back(strfmt("hellaswag %s: %lld examples: acc_norm %.4f, acc %.4f (llm.c's completion style)",
                           a.hellaswag.c_str(), static_cast<long long>(v[0]), acc_norm, acc));
  }
  if (val) {
    const int batches = a.batches > 0 ? a.batches : static_cast<int>(val->batches_per_epoch());
    RZ_CHECK(batches >= 1, "--val-data: no full batch of %d x %d tokens for each of %d rank(s) (smaller --batch or --seq)",
             a.batch, T, env.world_size);
    const std::vector<int> bytes = tok ? token_byte_lengths(*tok, cfg.vocab_size) : std::vector<int>();
    std::vector<int> in, tg;
    const ValSums vs = sum_val_batches(model, *val, a.batch, T, batches, tok ? &bytes : nullptr, in, tg);
    const std::vector<float> v = sum_over_ranks({static_cast<float>(vs.loss_sum), static_cast<float>(vs.batches),
                                                 static_cast<float>(vs.nats), static_cast<float>(vs.bytes)});
    const double loss = static_cast<double>(v[0]) / v[1];
    const std::optional<double> bpb = tok ? bits_per_byte(v[2], v[3]) : std::nullopt;
    if (tok && !bpb) no_bpb = "the validation targets decode to no bytes";
    out["val"] = {{"data", a.val_data}, {"batches", static_cast<int64_t>(v[1])}, {"B", a.batch}, {"T", T},
                  {"loss", loss}, {"bpb", bpb ? nlohmann::json(*bpb) : nlohmann::json(nullptr)}};
    if (!bpb) out["val"]["bpb_na"] = no_bpb;
    lines.push_back(strfmt("val %s: %lld batches of %d x %d tokens: loss %.4f, %s", a.val_data.c_str(),
                           static_cast<long long>(v[1]), a.batch, T, loss,
                           bpb ? strfmt("%.4f bits per byte (%s tokenizer)", *bpb, tok->name().c_str()).c_str()
                               : ("bits per byte n/a (" + no_bpb + ")").c_str()));
  }
  if (env.rank != 0) return 0;
  if (a.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("eval: model %s (L%d C%d NH%d V%d maxT%d), %s, %d rank(s)\n", a.model.c_str(), cfg.num_layers,
                cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.max_seq_len, precision_name(mo.precision),
                env.world_size);
    for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  }
  return 0;
}

const RegisterCommand kRegister{Command{"eval", "HellaSwag (llm.c's completion style) and val loss in bits per byte",
                                        run_eval, 63}};

}  // namespace
}  // namespace rz
