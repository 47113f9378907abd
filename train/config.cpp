// train/config.cpp: the key table behind TrainConfig, TOML loading, flags, validation.
//
// Every key is described once, in kKeys below: its name, the field it sets and its help
// line. The TOML loader, the CLI11 flags, the printed table and the checkpoint's copy of
// the configuration all walk that one table, so a key cannot exist in one and not the
// others.
#include "train/config.h"

#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <variant>

#include "base/check.h"

namespace rz {
namespace {

using Field = std::variant<int TrainConfig::*, int64_t TrainConfig::*, uint64_t TrainConfig::*,
                           double TrainConfig::*, bool TrainConfig::*, std::string TrainConfig::*>;

struct KeyDef {
  const char* name;
  Field field;
  const char* help;
};

// clang-format off
const KeyDef kKeys[] = {
  {"model", &TrainConfig::model, "model preset the shape starts from (tiny, d2, d4, d6, d12, d24, d36, d48)"},
  {"layers", &TrainConfig::layers, "number of layers L (0: the preset's)"},
  {"channels", &TrainConfig::channels, "channels C (0: the preset's)"},
  {"heads", &TrainConfig::heads, "attention heads NH (0: the preset's)"},
  {"vocab", &TrainConfig::vocab, "vocabulary size V (0: the tokenizer's, else the preset's)"},
  {"max_seq", &TrainConfig::max_seq, "longest sequence maxT, rows of wpe (0: the preset's)"},
  {"init", &TrainConfig::init, "llm.c model checkpoint (.bin) to start from instead of random init"},
  {"precision", &TrainConfig::precision, "fp32 or bf16"},
  {"device", &TrainConfig::device, "cpu (the CUDA backend cannot train yet)"},
  {"threads", &TrainConfig::threads, "OpenMP threads per rank (0: OMP_NUM_THREADS / the launcher's share)"},
  {"data", &TrainConfig::data, "training shards: a glob or comma-separated list of llm.c .bin files"},
  {"val_data", &TrainConfig::val_data, "validation shards (empty: no validation)"},
  {"tokenizer", &TrainConfig::tokenizer, "byte, gpt2 or a tokenizer.bin path (empty: tokenizer.bin beside the data)"},
  {"gpt2_dir", &TrainConfig::gpt2_dir, "directory holding encoder.json and vocab.bpe (tokenizer = gpt2)"},
  {"steps", &TrainConfig::steps, "optimizer steps in total (resumed runs count the earlier ones)"},
  {"batch", &TrainConfig::batch, "micro-batch size B (sequences per rank per micro-step)"},
  {"seq", &TrainConfig::seq, "sequence length T"},
  {"total_batch_tokens", &TrainConfig::total_batch_tokens, "tokens per optimizer step over all ranks (0: B*T*world, no accumulation)"},
  {"lr", &TrainConfig::lr, "peak learning rate"},
  {"warmup", &TrainConfig::warmup, "linear warmup steps"},
  {"lr_floor", &TrainConfig::lr_floor, "cosine decay ends at lr * lr_floor (a fraction in [0, 1])"},
  {"weight_decay", &TrainConfig::weight_decay, "AdamW decoupled weight decay"},
  {"grad_clip", &TrainConfig::grad_clip, "clip the global gradient norm to this (0: no clipping)"},
  {"seed", &TrainConfig::seed, "seed of model init, data order and sampling"},
  {"skip_nonfinite", &TrainConfig::skip_nonfinite, "skip a step whose loss is NaN or inf instead of stopping"},
  {"strategy", &TrainConfig::strategy, "ddp, zero1 or zero2"},
  {"nproc_per_node", &TrainConfig::nproc_per_node, "ranks to run on this node (> 1: ringzero launches them itself)"},
  {"nnodes", &TrainConfig::nnodes, "nodes in the job"},
  {"node_rank", &TrainConfig::node_rank, "index of this node"},
  {"master_addr", &TrainConfig::master_addr, "rendezvous host (rank 0's node)"},
  {"master_port", &TrainConfig::master_port, "rendezvous port (0: pick a free one; single node only)"},
  {"transport", &TrainConfig::transport, "auto, shm or tcp"},
  {"comm_timeout", &TrainConfig::comm_timeout, "seconds a collective may wait for a peer before failing"},
  {"bucket_mb", &TrainConfig::bucket_mb, "gradient bucket size in MiB"},
  {"buckets_in_flight", &TrainConfig::buckets_in_flight, "zero2: staging buckets reduce-scattering at once"},
  {"save_dir", &TrainConfig::save_dir, "directory for step_NNNNNNNN checkpoints (empty: none)"},
  {"save_every", &TrainConfig::save_every, "checkpoint every k steps, and at the end (0: only at the end)"},
  {"keep", &TrainConfig::keep, "keep the newest N complete checkpoints (0: all)"},
  {"resume", &TrainConfig::resume, "no; yes (--resume): the newest complete checkpoint in save_dir; auto: the newest intact one, else a fresh start"},
  {"overwrite", &TrainConfig::overwrite, "a run without resume deletes the checkpoints already in save_dir (else that is an error)"},
  {"eval_every", &TrainConfig::eval_every, "validation loss every n steps, and at the end (0: never)"},
  {"eval_batches", &TrainConfig::eval_batches, "validation batches per rank per evaluation"},
  {"sample_every", &TrainConfig::sample_every, "print a generated sample every m steps, and at the end (0: never)"},
  {"sample_tokens", &TrainConfig::sample_tokens, "tokens per generated sample"},
  {"sample_top_k", &TrainConfig::sample_top_k, "sampling: 0 greedy, k > 0 draw from the k most likely tokens"},
  {"metrics", &TrainConfig::metrics, "JSONL file with one object per step (empty: none)"},
  {"memory_report", &TrainConfig::memory_report, "JSON file for the per-rank memory report after step 1 (empty: none)"},
};
// clang-format on

const KeyDef* find_key(const std::string& name) {
  std::string n = name;
  std::replace(n.begin(), n.end(), '-', '_');
  for (const auto& k : kKeys)
    if (n == k.name) return &k;
  return nullptr;
}

std::string dashed(const char* name) {
  std::string s = name;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

template <typename I>
bool parse_integer(const std::string& s, I& out) {
  const char* b = s.data();
  const char* e = b + s.size();
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && !s.empty();
}

// Integers may be written as 1e6 or 65536; floats anything strtod takes that is finite.
template <typename I>
bool parse_integer_loose(const std::string& s, I& out) {
  if (parse_integer(s, out)) return true;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(d) || d != std::floor(d)) return false;
  if (d < static_cast<double>(std::numeric_limits<I>::min()) ||
      d > static_cast<double>(std::numeric_limits<I>::max()))
    return false;
  out = static_cast<I>(d);
  return true;
}

const char* kind_of(const Field& f) {
  switch (f.index()) {
    case 0: case 1: case 2: return "int";
    case 3: return "float";
    case 4: return "bool";
    default: return "string";
  }
}

const char* toml_type_name(const toml::node& n) {
  if (n.is_table()) return "table";
  if (n.is_array()) return "array";
  if (n.is_string()) return "string";
  if (n.is_integer()) return "integer";
  if (n.is_floating_point()) return "float";
  if (n.is_boolean()) return "boolean";
  return "date/time";
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> v;
    for (const auto& k : kKeys) v.push_back({k.name, kind_of(k.field), k.help});
    return v;
  }();
  return keys;
}

void set_config_value(TrainConfig& cfg, const std::string& key, const std::string& value) {
  const KeyDef* k = find_key(key);
  RZ_CHECK(k != nullptr, "unknown config key '%s' (ringzero train --help lists them)", key.c_str());
  const char* name = k->name;
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(cfg.*member)>;
        T& dst = cfg.*member;
        if constexpr (std::is_same_v<T, std::string>) {
          dst = value;
          if (std::string(name) == "resume") {  // a yes/no key with a third value, auto
            if (value == "true" || value == "1" || value == "on" || value.empty()) dst = "yes";
            if (value == "false" || value == "0" || value == "off") dst = "no";
            RZ_CHECK(dst == "no" || dst == "yes" || dst == "auto",
                     "resume: expected no, yes or auto (or true/false), found '%s'", value.c_str());
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value == "true" || value == "1" || value == "yes" || value == "on") dst = true;
          else if (value == "false" || value == "0" || value == "no" || value == "off") dst = false;
          else RZ_FAIL("%s: expected true or false, found '%s'", name, value.c_str());
        } else if constexpr (std::is_same_v<T, double>) {
          char* end = nullptr;
          double d = std::strtod(value.c_str(), &end);
          RZ_CHECK(!value.empty() && *end == '\0' && std::isfinite(d),
                   "%s: expected a number, found '%s'", name, value.c_str());
          dst = d;
        } else {
          T v{};
          RZ_CHECK(parse_integer_loose(value, v), "%s: expected an integer, found '%s'", name,
                   value.c_str());
          dst = v;
        }
      },
      k->field);
}

std::string get_config_value(const TrainConfig& cfg, const std::string& key) {
  const KeyDef* k = find_key(key);
  RZ_CHECK(k != nullptr, "unknown config key '%s'", key.c_str());
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::remove_cvref_t<decltype(cfg.*member)>;
        const T& v = cfg.*member;
        if constexpr (std::is_same_v<T, std::string>) return v;
        else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) return strfmt("%.17g", v);
        else return std::to_string(v);
      },
      k->field);
}

void load_config_toml(TrainConfig& cfg, const std::string& path) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    if (src.begin.line == 0)  // the file could not be opened
      RZ_FAIL("%s: cannot read config file (%s)", path.c_str(), std::string(e.description()).c_str());
    RZ_FAIL("%s:%u: TOML syntax error: %s", path.c_str(), static_cast<unsigned>(src.begin.line),
            std::string(e.description()).c_str());
  }
  for (auto&& [key_view, node] : tbl) {
    const std::string key(key_view.str());
    const unsigned line = static_cast<unsigned>(node.source().begin.line);
    const KeyDef* k = find_key(key);
    RZ_CHECK(k != nullptr, "%s:%u: unknown key '%s' (ringzero train --help lists the keys)",
             path.c_str(), line, key.c_str());
    const std::string kind = kind_of(k->field);
    std::string text;
    if (kind == "string" && node.is_string()) {
      text = *node.value<std::string>();
    } else if (key == "resume" && node.is_boolean()) {  // resume = true / false
      text = *node.value<bool>() ? "yes" : "no";
    } else if (kind == "bool" && node.is_boolean()) {
      text = *node.value<bool>() ? "true" : "false";
    } else if (kind == "int" && node.is_integer()) {
      text = std::to_string(*node.value<int64_t>());
    } else if (kind == "float" && (node.is_floating_point() || node.is_integer())) {
      text = strfmt("%.17g", *node.value<double>());
    } else {
      RZ_FAIL("%s:%u: %s: expected %s %s, found a %s", path.c_str(), line, key.c_str(),
              kind == "int" ? "an" : "a", kind == "float" ? "number" : kind.c_str(),
              toml_type_name(node));
    }
    try {
      set_config_value(cfg, key, text);
    } catch (const Error& e) {
      RZ_FAIL("%s:%u: %s", path.c_str(), line, e.what());
    }
  }
}

void validate_config(const TrainConfig& c) {
  auto positive = [](const char* key, int64_t v) {
    RZ_CHECK(v > 0, "%s: expected a positive integer, found %lld", key, static_cast<long long>(v));
  };
  auto non_negative = [](const char* key, double v) {
    RZ_CHECK(v >= 0, "%s: expected a value >= 0, found %g", key, v);
  };
  RZ_CHECK(c.device == "cpu" || c.device == "cuda", "device: expected cpu or cuda, found '%s'",
           c.device.c_str());
  RZ_CHECK(c.device != "cuda",
           "device: the CUDA backend cannot train yet; use --device cpu (GPU kernels are tested by "
           "`ringzero verify`)");
  RZ_CHECK(c.precision == "fp32" || c.precision == "bf16", "precision: expected fp32 or bf16, found '%s'",
           c.precision.c_str());
  RZ_CHECK(c.strategy == "ddp" || c.strategy == "zero1" || c.strategy == "zero2",
           "strategy: expected ddp, zero1 or zero2, found '%s'", c.strategy.c_str());
  RZ_CHECK(c.transport == "auto" || c.transport == "shm" || c.transport == "tcp",
           "transport: expected auto, shm or tcp, found '%s'", c.transport.c_str());
  RZ_CHECK(!c.data.empty(), "data: no training data given (--data 'DIR/train_*.bin')");
  positive("steps", c.steps);
  positive("batch", c.batch);
  positive("seq", c.seq);
  positive("nproc_per_node", c.nproc_per_node);
  positive("nnodes", c.nnodes);
  positive("buckets_in_flight", c.buckets_in_flight);
  positive("eval_batches", c.eval_batches);
  positive("sample_tokens", c.sample_tokens);
  for (auto [key, v] : {std::pair{"layers", c.layers}, {"channels", c.channels}, {"heads", c.heads},
                        {"vocab", c.vocab}, {"max_seq", c.max_seq}, {"warmup", c.warmup},
                        {"threads", c.threads}, {"save_every", c.save_every}, {"keep", c.keep},
                        {"eval_every", c.eval_every}, {"sample_every", c.sample_every},
                        {"sample_top_k", c.sample_top_k}, {"master_port", c.master_port}})
    non_negative(key, v);
  RZ_CHECK(c.node_rank >= 0 && c.node_rank < c.nnodes, "node_rank: expected 0..%d, found %d",
           c.nnodes - 1, c.node_rank);
  RZ_CHECK(c.master_port <= 65535, "master_port: expected 0..65535, found %d", c.master_port);
  RZ_CHECK(c.nnodes == 1 || c.master_port > 0,
           "master_port: a multi-node job needs an explicit port (every node must use the same one)");
  non_negative("total_batch_tokens", static_cast<double>(c.total_batch_tokens));
  RZ_CHECK(c.lr > 0, "lr: expected a positive learning rate, found %g", c.lr);
  RZ_CHECK(c.lr_floor >= 0 && c.lr_floor <= 1, "lr_floor: expected a fraction in [0, 1], found %g",
           c.lr_floor);
  non_negative("weight_decay", c.weight_decay);
  non_negative("grad_clip", c.grad_clip);
  RZ_CHECK(c.comm_timeout > 0, "comm_timeout: expected seconds > 0, found %g", c.comm_timeout);
  RZ_CHECK(c.bucket_mb > 0, "bucket_mb: expected MiB > 0, found %g", c.bucket_mb);
  RZ_CHECK(c.resume == "no" || c.resume == "yes" || c.resume == "auto",
           "resume: expected no, yes or auto, found '%s'", c.resume.c_str());
  RZ_CHECK(!c.resuming() || !c.save_dir.empty(), "resume: needs save_dir (--save-dir DIR) to resume from");
  RZ_CHECK(!c.resuming() || !c.overwrite, "overwrite: cannot be combined with resume");
  RZ_CHECK(!c.resuming() || c.init.empty(),
           "init: cannot be combined with resume (the checkpoint already holds the model)");
}

std::string format_config_table(const TrainConfig& cfg) {
  size_t w = 0;
  for (const auto& k : kKeys) w = std::max(w, std::string(k.name).size());
  std::string out = strfmt("%-*s  %s\n", static_cast<int>(w), "key", "value");
  out.append(w, '-').append("  ").append(24, '-').append("\n");
  for (const auto& k : kKeys) {
    std::string v = get_config_value(cfg, k.name);
    if (k.field.index() == 3) v = strfmt("%g", std::stod(v));  // floats: short form in the table
    if (v.empty()) v.assign(1, '-');
    out += strfmt("%-*s  %s\n", static_cast<int>(w), k.name, v.c_str());
  }
  return out;
}

bool parse_train_args(int argc, char** argv, TrainConfig& cfg) {
  CLI::App app{
      "Train a GPT-2 model on one or many ranks (ddp, zero1, zero2).\n"
      "Settings come from the defaults, then CONFIG.toml (flat `key = value` lines), then the\n"
      "flags below, which win. With --nproc-per-node N > 1 ringzero starts the N ranks itself;\n"
      "under torchrun, srun or mpirun each process reads its rank from the environment.",
      "ringzero train"};
  std::string config_path;
  app.add_option("config", config_path, "TOML config file (configs/tiny.toml, ...)");
  std::map<std::string, std::string> given;
  std::vector<std::pair<std::string, CLI::Option*>> opts;
  for (const auto& k : kKeys) {
    std::string flag = "--" + dashed(k.name);
    CLI::Option* o;
    if (k.field.index() == 4)
      o = app.add_flag(flag + "{true}", given[k.name], k.help);
    else if (std::string(k.name) == "resume")  // --resume, --resume=auto (and --resume auto, below)
      o = app.add_flag(flag + "{yes}", given[k.name], k.help);
    else
      o = app.add_option(flag, given[k.name], k.help)->type_name(kind_of(k.field));
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    const std::string def = get_config_value(TrainConfig{}, k.name);
    if (!def.empty() && k.field.index() != 4 && std::string(k.name) != "resume") o->default_str(k.field.index() == 3 ? strfmt("%g", std::stod(def)) : def);  // a repeated flag: the last one wins
    opts.emplace_back(k.name, o);
  }
  // "--save-dir=" means an empty value; CLI11 would take the next argument instead.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11's vector form wants the arguments reversed
    std::string a = argv[i];
    // "--resume auto" (a value after the flag) is "--resume=auto"; a bare --resume stays a flag.
    if (i >= 2 && std::string(argv[i - 1]) == "--resume" &&
        (a == "auto" || a == "yes" || a == "no" || a == "true" || a == "false")) {
      args.push_back("--resume=" + a);
      --i;
      continue;
    }
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=') {
      args.emplace_back("");
      a.pop_back();
    }
    args.push_back(a);
  }
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    RZ_FAIL("%s", e.what());
  }
  if (!config_path.empty()) load_config_toml(cfg, config_path);
  for (const auto& [name, o] : opts) {
    if (o->count() == 0) continue;
    try {
      set_config_value(cfg, name, given[name]);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind(name + ":", 0) == 0) msg = msg.substr(name.size() + 1);
      RZ_FAIL("--%s:%s", dashed(name.c_str()).c_str(), msg.c_str());
    }
  }
  return true;
}

}  // namespace rz
