// train/config.cpp: the settings table behind TrainConfig, its values from text and TOML,
// flags, validation. Reading a TOML file (its size, its characters, its syntax errors) is
// train/config_toml.cpp's.
//
// Every key is described once, in kSettings below: its name, the field it sets, the values
// it allows and its help line. The TOML loader, the CLI11 flags, the per-key checks, --help
// and the printed table all walk that one table, so a key cannot exist in one and not the
// others; other subcommands take their rows of it as flags (add_setting_flags). Keys with
// a module's own type (precision, strategy, device, recompute, attention, resume) are held
// as that type and read and printed by the module's one parse/name pair (Named below),
// whose errors also name the allowed values; the bucket size is checked by zero/'s own
// check.
#include "train/config.h"

#include "train/config_table.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>
#include <variant>

#include "base/check.h"
#include "base/checked.h"
#include "base/file.h"
#include "base/printable.h"
#include "comm/options.h"
#include "data/unicode.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul_onednn.h"
#include "model/config.h"
#include "zero/buckets.h"

namespace rz {
namespace {

using Field = std::variant<int TrainConfig::*, int64_t TrainConfig::*, uint64_t TrainConfig::*,
                           double TrainConfig::*, bool TrainConfig::*, std::string TrainConfig::*,
                           PrecisionChoice TrainConfig::*, StrategyKind TrainConfig::*, DeviceSpec TrainConfig::*,
                           Recompute TrainConfig::*, Attention TrainConfig::*, Resume TrainConfig::*,
                           CommBackend TrainConfig::*, CommTransport TrainConfig::*, ModelSource TrainConfig::*>;

// The keys held as a module's own type, each read and written by that module's one
// parse/name pair (which also names the allowed values in its errors).
template <typename T>
struct Named;
template <>
struct Named<PrecisionChoice> {
  static PrecisionChoice parse(const std::string& s) { return parse_precision_choice(s); }
  static std::string name(PrecisionChoice v) { return precision_choice_name(v); }
  static std::string allowed() { return or_list(enum_names(kPrecisionChoices, precision_choice_name)); }
};
template <>
struct Named<StrategyKind> {
  static StrategyKind parse(const std::string& s) { return parse_strategy(s); }
  static std::string name(StrategyKind v) { return strategy_name(v); }
  static std::string allowed() { return or_list(strategy_names()); }
};
template <>
struct Named<DeviceSpec> {
  static DeviceSpec parse(const std::string& s) { return parse_device_spec(s); }
  static std::string name(DeviceSpec v) { return device_spec_name(v); }
  static std::string allowed() { return "cpu, cuda, cuda:K or sim (tests)"; }
};
template <>
struct Named<Recompute> {
  static Recompute parse(const std::string& s) { return parse_recompute(s); }
  static std::string name(Recompute v) { return recompute_name(v); }
  static std::string allowed() { return or_list(recompute_names()); }
};
template <>
struct Named<Attention> {
  static Attention parse(const std::string& s) { return parse_attention(s); }
  static std::string name(Attention v) { return attention_name(v); }
  static std::string allowed() { return or_list(attention_names()); }
};
template <>
struct Named<Resume> {
  static Resume parse(const std::string& s) { return parse_resume(s); }
  static std::string name(Resume v) { return resume_name(v); }
  static std::string allowed() { return "no, yes or auto (or true/false)"; }
};
template <>
struct Named<CommBackend> {
  static CommBackend parse(const std::string& s) {
    RZ_CHECK(std::find(std::begin(kCommBackends), std::end(kCommBackends), s) != std::end(kCommBackends),
             "expected %s, found '%s'", allowed().c_str(), s.c_str());
    return parse_comm_backend(s);
  }
  static std::string name(CommBackend v) { return comm_backend_name(v); }
  static std::string allowed() { return or_list(std::vector<std::string>(std::begin(kCommBackends), std::end(kCommBackends))); }
};
// Only the transports between processes: `thread` is for ranks that are threads of one process.
template <>
struct Named<CommTransport> {
  static CommTransport parse(const std::string& s) {
    RZ_CHECK(std::find(std::begin(kProcessTransports), std::end(kProcessTransports), s) != std::end(kProcessTransports),
             "expected %s, found '%s'", allowed().c_str(), s.c_str());
    return parse_comm_transport(s);
  }
  static std::string name(CommTransport v) { return comm_transport_name(v); }
  static std::string allowed() {
    return or_list(std::vector<std::string>(std::begin(kProcessTransports), std::end(kProcessTransports)));
  }
};
template <>
struct Named<ModelSource> {
  static ModelSource parse(const std::string& s) { return parse_model_source(s); }
  static std::string name(const ModelSource& v) { return model_source_name(v); }
  static std::string allowed() { return ""; }  // the help line says it (kModelSourceHelp)
};
template <typename T>
constexpr bool is_named_v = requires(const std::string& s) { Named<T>::parse(s); };

// What one key's value may be, checked as soon as the value is read and again by
// validate_config. Named types need no rule: their parsers accept only their names.
enum class Allowed {
  any,
  positive,      // > 0
  non_negative,  // >= 0
  fraction,      // in [0, 1]
  port,          // 0..65535
  bucket_mb,     // zero/'s check of a bucket size
  threads,       // 0, or 1 .. base/checked.h's max_threads()
  reduce_dtype,  // auto, bf16 or fp32 (--grad-reduce-dtype)
  spike_metric,  // loss or grad_norm
  sample_tokens, // 1 .. kMaxSampleTokens
  family,        // auto, or a family of model/family.h
  classifier,    // auto, tied or untied
};

struct Setting {
  const char* name;
  Field field;
  Allowed allowed;
  const char* help;
  Agree agree = Agree::undecided;  // whether every rank must hold the same value (config.h); each row decides
};

// clang-format off
constexpr Setting kSettings[] = {
  {"model", &TrainConfig::model, Allowed::any, "model preset the shape starts from: GPT-2's tiny, d2, d4, d6, d12, d24, d36, d48; Llama-style llama-tiny, llama-d4, llama-d6, llama-d12, smollm2-135m (docs/model.md)", Agree::same},
  {"family", &TrainConfig::family, Allowed::family, "the block: gpt2 (layernorm, learned positions, GELU MLP, biases, tied) or llama (RMSNorm, rotary positions, SwiGLU MLP, grouped kv heads, no biases, tied or untied); auto: the preset's. Another family than the preset's keeps its L, C, NH, V and maxT", Agree::same},
  {"layers", &TrainConfig::layers, Allowed::non_negative, "number of layers L (0: the preset's)", Agree::same},
  {"channels", &TrainConfig::channels, Allowed::non_negative, "channels C (0: the preset's)", Agree::same},
  {"heads", &TrainConfig::heads, Allowed::non_negative, "attention heads NH (0: the preset's)", Agree::same},
  {"kv_heads", &TrainConfig::kv_heads, Allowed::non_negative, "llama: key/value heads NKV, a divisor of heads (NH: multi-head, 1: multi-query; 0: the preset's)", Agree::same},
  {"intermediate", &TrainConfig::intermediate, Allowed::non_negative, "llama: width H of the gated MLP (0: the preset's; for other channels than the preset's 8C/3 rounded up to 64)", Agree::same},
  {"rope_theta", &TrainConfig::rope_theta, Allowed::non_negative, "llama: base of the rotary embeddings' frequencies (0: the preset's, 10000 unless it says)", Agree::same},
  {"norm_eps", &TrainConfig::norm_eps, Allowed::non_negative, "llama: RMSNorm's epsilon (0: the preset's, 1e-5)", Agree::same},
  {"classifier", &TrainConfig::classifier, Allowed::classifier, "tied (the token embedding is the classifier) or untied (llama: an lm_head of its own, Vp x C more parameters); auto: the preset's", Agree::same},
  {"vocab", &TrainConfig::vocab, Allowed::non_negative, "vocabulary size V (0: the tokenizer's, else the preset's)", Agree::same},
  {"max_seq", &TrainConfig::max_seq, Allowed::non_negative, "longest sequence maxT: rows of wpe (gpt2), the longest context (llama) (0: the preset's)", Agree::same},
  {"init", &TrainConfig::init, Allowed::any, "the model to start from instead of random init: an llm.c model .bin, a checkpoint directory (step_NNNNNNNN/, or a save_dir: its newest complete checkpoint) or hf:DIR (a Hugging Face GPT-2 directory)", Agree::same_files},
  {"precision", &TrainConfig::precision_choice, Allowed::any, "storage precision of parameters, gradients and activations; auto: bf16 where this CPU multiplies bf16 in hardware (AVX512_BF16 or AMX-BF16), else fp32 (the configuration table says which and why)", Agree::same},
  {"device", &TrainConfig::device, Allowed::any, "where the model runs: cpu, cuda (several ranks: LOCAL_RANK mod the GPUs) or cuda:K (every rank on GPU K); GPU ranks need --comm ring or nccl; sim: the simulated device, for tests (GPU code paths on the CPU, docs/cuda.md)", Agree::same_kind},
  {"recompute", &TrainConfig::recompute, Allowed::any, "activations recomputed in backward instead of kept: none (keep all), gelu (keep no MLP GELU output, 4C per position per layer) or layer (keep only each block's input, C per position per layer, and rerun the block's forward in backward)", Agree::same},
  {"attention", &TrainConfig::attention, Allowed::any, "what attention keeps for backward: materialized (the (T, T) probabilities per head and layer) or flash (one float per row; backward recomputes the probabilities)", Agree::same},
  {"threads", &TrainConfig::threads, Allowed::threads, "OpenMP threads per rank (0: OMP_NUM_THREADS / the launcher's share)", Agree::free},
  {"data", &TrainConfig::data, Allowed::any, "training shards: a glob or comma-separated list of llm.c .bin files", Agree::same_files},
  {"val_data", &TrainConfig::val_data, Allowed::any, "validation shards (empty: no validation)", Agree::same_files},
  {"tokenizer", &TrainConfig::tokenizer, Allowed::any, "byte, gpt2 or a tokenizer.bin path (empty: tokenizer.bin beside the data)", Agree::same_files},
  {"gpt2_dir", &TrainConfig::gpt2_dir, Allowed::any, "directory holding encoder.json and vocab.bpe (tokenizer = gpt2)", Agree::same_files},
  {"steps", &TrainConfig::steps, Allowed::positive, "optimizer steps in total (resumed runs count the earlier ones)", Agree::same},
  {"batch", &TrainConfig::batch, Allowed::positive, "micro-batch size B (sequences per rank per micro-step)", Agree::same},
  {"seq", &TrainConfig::seq, Allowed::positive, "sequence length T", Agree::same},
  {"total_batch_tokens", &TrainConfig::total_batch_tokens, Allowed::non_negative, "tokens per optimizer step over all ranks (0: B*T*world, no accumulation)", Agree::same},
  {"lr", &TrainConfig::lr, Allowed::positive, "peak learning rate", Agree::same},
  {"warmup", &TrainConfig::warmup, Allowed::non_negative, "linear warmup steps", Agree::same},
  {"lr_floor", &TrainConfig::lr_floor, Allowed::fraction, "cosine decay ends at lr * lr_floor", Agree::same},
  {"weight_decay", &TrainConfig::weight_decay, Allowed::non_negative, "AdamW decoupled weight decay", Agree::same},
  {"grad_clip", &TrainConfig::grad_clip, Allowed::non_negative, "clip the global gradient norm to this (0: no clipping)", Agree::same},
  {"seed", &TrainConfig::seed, Allowed::any, "seed of model init, data order and sampling", Agree::same},
  {"skip_nonfinite", &TrainConfig::skip_nonfinite, Allowed::any, "skip a step whose loss is NaN or inf instead of stopping", Agree::same},
  {"max_consecutive_skips", &TrainConfig::max_consecutive_skips, Allowed::positive, "skip_nonfinite: the run stops with an error after this many steps skipped in a row (the one bound a loss-spike guard shares)", Agree::same},
  {"spike_zscore", &TrainConfig::spike_zscore, Allowed::non_negative, "loss-spike guard: skip the update of a step whose loss (spike_metric) is more than this many standard deviations above the mean of the last spike_window accepted steps; skips count against max_consecutive_skips (0: off)", Agree::same},
  {"spike_window", &TrainConfig::spike_window, Allowed::positive, "spike guard: accepted steps in its moving window (nothing is skipped until it is full)", Agree::same},
  {"spike_metric", &TrainConfig::spike_metric, Allowed::spike_metric, "spike guard: what it watches, loss or grad_norm (the global gradient norm before clipping)", Agree::same},
  {"strategy", &TrainConfig::strategy, Allowed::any, "how gradients, optimizer state and (zero3) parameters are kept and synchronised (docs/zero.md)", Agree::same},
  {"nproc_per_node", &TrainConfig::nproc_per_node, Allowed::positive, "ranks to run on this node (> 1: ringzero launches them itself)", Agree::free},
  {"nnodes", &TrainConfig::nnodes, Allowed::positive, "nodes in the job", Agree::free},
  {"node_rank", &TrainConfig::node_rank, Allowed::non_negative, "index of this node", Agree::free},
  {"master_addr", &TrainConfig::master_addr, Allowed::any, "rendezvous host (rank 0's node)", Agree::free},
  {"master_port", &TrainConfig::master_port, Allowed::port, "rendezvous port (0: pick a free one; single node only)", Agree::free},
  {"comm", &TrainConfig::comm, Allowed::any, "collectives: ring (ringzero's own), mpi (ranks started by mpirun) or nccl (GPU ranks; " RZ_GPU_STATUS ")", Agree::same},
  {"transport", &TrainConfig::transport, Allowed::any, "how ranks on different processes talk (auto: shm when all share a host)", Agree::same},
  {"comm_timeout", &TrainConfig::comm_timeout, Allowed::positive, "seconds a collective may wait for a peer before failing", Agree::free},
  {"comm_debug", &TrainConfig::comm_debug, Allowed::any, "compare every collective's (seq, op, dtype, count) across ranks before it runs: a program mismatch fails at once, naming both sides (RINGZERO_COMM_DEBUG=1)", Agree::same},
  {"flight_dir", &TrainConfig::flight_dir, Allowed::any, "where each rank writes its flight record (rank<R>.json) on a comm error, SIGUSR1 or the watchdog; `ringzero doctor DIR` reads them (empty: save_dir/flight, else TMPDIR/ringzero-UID/flight-JOB, private to this user)", Agree::free},
  {"flight_entries", &TrainConfig::flight_entries, Allowed::non_negative, "collectives each rank's flight recorder keeps (0: none)", Agree::free},
  {"flight_watchdog", &TrainConfig::flight_watchdog, Allowed::non_negative, "seconds without progress in a collective before a rank writes its flight record (0: never; the comm timeout always does)", Agree::free},
  {"bucket_mb", &TrainConfig::bucket_mb, Allowed::bucket_mb, "gradient bucket size in MiB", Agree::same},
  {"buckets_in_flight", &TrainConfig::buckets_in_flight, Allowed::positive, "zero2: staging buckets reduce-scattering at once", Agree::same},
  {"grad_shard_fp32", &TrainConfig::grad_shard_fp32, Allowed::any, "zero2 in bf16: keep the owned gradient shard in fp32 (exact accumulation)", Agree::same},
  {"grad_reduce_dtype", &TrainConfig::grad_reduce_dtype, Allowed::reduce_dtype, "bf16 runs: the dtype gradient buckets travel and are summed in: bf16 (rounded at every ring hop) or fp32 (twice the bytes, rounded once; fp32 reduce buffers); auto: the precision's (docs/comm.md)", Agree::same},
  {"save_dir", &TrainConfig::save_dir, Allowed::any, "directory for step_NNNNNNNN checkpoints (empty: none); one job at a time (ringzero.lock)", Agree::free},
  {"save_every", &TrainConfig::save_every, Allowed::non_negative, "checkpoint every k steps, and at the end (0: only at the end)", Agree::same},
  {"keep", &TrainConfig::keep, Allowed::non_negative, "keep the newest N complete checkpoints (0: all)", Agree::same},
  {"resume", &TrainConfig::resume, Allowed::any, "yes (--resume): the newest complete checkpoint in save_dir; auto: the newest intact one, else a fresh start", Agree::same},
  {"overwrite", &TrainConfig::overwrite, Allowed::any, "a run without resume deletes the checkpoints already in save_dir (else that is an error)", Agree::same},
  {"eval_every", &TrainConfig::eval_every, Allowed::non_negative, "validation loss every n steps, and at the end (0: never)", Agree::same},
  {"eval_batches", &TrainConfig::eval_batches, Allowed::positive, "validation batches per rank per evaluation", Agree::same},
  {"hellaswag", &TrainConfig::hellaswag, Allowed::any, "llm.c eval file (hellaswag_val.bin, the tokenizer's ids) scored in llm.c's completion style: acc (least summed loss) and acc_norm (least mean loss) over each example's endings; rows must fit in seq (empty: none)", Agree::same_files},
  {"hellaswag_every", &TrainConfig::hellaswag_every, Allowed::non_negative, "score --hellaswag every n steps, and at the end, sharded over the ranks (0: never)", Agree::same},
  {"sample_every", &TrainConfig::sample_every, Allowed::non_negative, "print a generated sample every m steps, and at the end (0: never)", Agree::same},
  {"sample_tokens", &TrainConfig::sample_tokens, Allowed::sample_tokens, "tokens per generated sample", Agree::same},
  {"sample_top_k", &TrainConfig::sample_top_k, Allowed::non_negative, "sampling: 0 greedy, k > 0 draw from the k most likely tokens", Agree::same},
  {"metrics", &TrainConfig::metrics, Allowed::any, "JSONL file with one object per step (empty: none)", Agree::free},
  {"tensorboard", &TrainConfig::tensorboard, Allowed::any, "directory for a TensorBoard event file of this run: every value the metrics JSONL records, per step (tag = its key), and each rank's peak memory; flushed at each eval (empty: none)", Agree::free},
  {"memory_report", &TrainConfig::memory_report, Allowed::any, "JSON file for the per-rank memory report after step 1 (empty: none)", Agree::free},
  {"trace", &TrainConfig::trace, Allowed::any, "Chrome trace-event JSON timeline for Perfetto / chrome://tracing (empty: none)", Agree::same_presence},
  {"trace_steps", &TrainConfig::trace_steps, Allowed::any, "steps A:B (1-based, inclusive) the --trace timeline covers", Agree::same},
};
// clang-format on

// The first row whose agree column is undecided, or -1. A row added without deciding whether
// the ranks of a job must share its value fails the build here (its index shows in the error).
constexpr int first_undecided_row() {
  for (int i = 0; i < static_cast<int>(std::size(kSettings)); ++i)
    if (kSettings[i].agree == Agree::undecided) return i;
  return -1;
}
static_assert(first_undecided_row() == -1,
              "a kSettings row leaves its agree column undecided: say whether every rank must hold the same value");

const Setting* find_setting(const std::string& name) {
  std::string n = name;
  std::replace(n.begin(), n.end(), '-', '_');
  for (const auto& k : kSettings)
    if (n == k.name) return &k;
  return nullptr;
}

std::string dashed(const char* name) {
  std::string s = name;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

template <typename T>
constexpr bool is_int_v = std::is_same_v<T, int> || std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>;

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
  // I's range as doubles: [min, 2^digits), exact powers of two (max itself rounds up to 2^digits
  // for 64-bit types, and converting 2^64 would be undefined).
  const double top = std::ldexp(1.0, std::numeric_limits<I>::digits);
  if (d < static_cast<double>(std::numeric_limits<I>::min()) || d >= top) return false;
  out = static_cast<I>(d);
  return true;
}

const char* kind_of(const Field& f) {
  return std::visit(
      [](auto member) -> const char* {
        using T = std::remove_cvref_t<decltype(TrainConfig{}.*member)>;
        if constexpr (is_int_v<T>) return "int";
        else if constexpr (std::is_same_v<T, double>) return "float";
        else if constexpr (std::is_same_v<T, bool>) return "bool";
        else return "string";  // strings and named types by name
      },
      f);
}

// The allowed values of a key in words, for --help and config_keys().
std::string allowed_text(const Setting& k) {
  const std::string named = std::visit(
      [](auto member) -> std::string {
        using T = std::remove_cvref_t<decltype(TrainConfig{}.*member)>;
        if constexpr (is_named_v<T>) return Named<T>::allowed();
        else return "";
      },
      k.field);
  if (!named.empty()) return named;
  switch (k.allowed) {
    case Allowed::any: return "";
    case Allowed::positive: return "> 0";
    case Allowed::non_negative: return ">= 0";
    case Allowed::fraction: return "0 to 1";
    case Allowed::port: return "0..65535";
    case Allowed::bucket_mb: return "> 0";
    case Allowed::threads: return strfmt("0 or 1..%d", max_threads());
    case Allowed::reduce_dtype: return "auto, bf16 or fp32";
    case Allowed::spike_metric: return "loss or grad_norm";
    case Allowed::sample_tokens: return strfmt("1..%d", kMaxSampleTokens);
    case Allowed::family: return "auto, " + or_list(family_names());
    case Allowed::classifier: return "auto, tied or untied";
  }
  return "";
}

// Throws "expected ..., found ..." (without the key) when the value of k in c is not allowed.
void check_allowed(const TrainConfig& c, const Setting& k) {
  std::visit(
      [&](auto member) {
        using T = std::remove_cvref_t<decltype(c.*member)>;
        const T& v = c.*member;
        if constexpr (is_int_v<T> || std::is_same_v<T, double>) {
          const double d = static_cast<double>(v);
          switch (k.allowed) {
            case Allowed::positive:
              if constexpr (is_int_v<T>)
                RZ_CHECK(v > 0, "expected a positive integer, found %lld", static_cast<long long>(v));
              else
                RZ_CHECK(v > 0, "expected a value > 0, found %g", d);
              break;
            case Allowed::non_negative: RZ_CHECK(d >= 0, "expected a value >= 0, found %g", d); break;
            case Allowed::fraction: RZ_CHECK(d >= 0 && d <= 1, "expected a fraction in [0, 1], found %g", d); break;
            case Allowed::port: RZ_CHECK(d >= 0 && d <= 65535, "expected 0..65535, found %g", d); break;
            case Allowed::bucket_mb: check_bucket_mb(d); break;
            case Allowed::sample_tokens:
              RZ_CHECK(d >= 1 && d <= kMaxSampleTokens, "expected 1..%d tokens (each is a forward pass), found %lld",
                       kMaxSampleTokens, static_cast<long long>(v));
              break;
            case Allowed::threads:
              RZ_CHECK(d >= 0 && d <= max_threads(),
                       "expected 0 (OMP_NUM_THREADS or the launcher's share) or 1..%d (%d x the %d cores of this "
                       "machine), found %lld", max_threads(), kThreadsPerCore, online_cores(), static_cast<long long>(v));
              break;
            default: break;
          }
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (k.allowed == Allowed::spike_metric)
            RZ_CHECK(v == "loss" || v == "grad_norm", "expected %s, found '%s'", allowed_text(k).c_str(), v.c_str());
          if (k.allowed == Allowed::family) {
            const std::vector<std::string> names = family_names();
            RZ_CHECK(v == "auto" || std::find(names.begin(), names.end(), v) != names.end(), "expected %s, found '%s'",
                     allowed_text(k).c_str(), v.c_str());
          }
          if (k.allowed == Allowed::classifier)
            RZ_CHECK(v == "auto" || v == "tied" || v == "untied", "expected %s, found '%s'", allowed_text(k).c_str(),
                     v.c_str());
          if (k.allowed == Allowed::reduce_dtype)
            RZ_CHECK(v == "auto" || v == "bf16" || v == "fp32", "expected %s, found '%s'", allowed_text(k).c_str(),
                     v.c_str());
        }
      },
      k.field);
}

// Runs f; an error it throws is rethrown as "KEY: message" (a message that already starts
// with "KEY:", like the enum parsers', is kept as it is).
template <typename F>
void naming_key(const char* key, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what(), prefix = std::string(key) + ":";
    if (msg.rfind(prefix, 0) == 0) throw;
    RZ_FAIL("%s: %s", key, msg.c_str());
  }
}

// Every string a setting holds is a path, a pattern or a name: plain text. A NUL would cut
// the path short at the first system call that takes it (a metrics file written elsewhere
// than named), and any other control character would reach the terminal wherever the value
// is printed. Both are refused, from TOML (\u0000, \u001b) and from flags alike.
void check_plain_text(const std::string& value) {
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    RZ_CHECK(c != 0, "holds a NUL character at offset %zu, which would cut the value short there ('%s' ...); "
             "a setting's text cannot hold one", i, printable(value.substr(0, i)).c_str());
    RZ_CHECK(c >= 0x20 && c != 0x7f, "holds a control character (byte 0x%02x at offset %zu: '%s'); a setting's "
             "text must be printable", c, i, printable(value).c_str());
  }
}

// Sets a field from its text form (a flag's value). Throws without naming the key.
template <typename T>
void from_text(T& dst, const std::string& value) {
  if constexpr (std::is_same_v<T, std::string> || is_named_v<T>) check_plain_text(value);
  if constexpr (std::is_same_v<T, std::string>) {
    dst = value;
  } else if constexpr (is_named_v<T>) {
    dst = Named<T>::parse(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (value == "true" || value == "1" || value == "yes" || value == "on") dst = true;
    else if (value == "false" || value == "0" || value == "no" || value == "off") dst = false;
    else RZ_FAIL("expected true or false, found '%s'", value.c_str());
  } else if constexpr (std::is_same_v<T, double>) {
    char* end = nullptr;
    double d = std::strtod(value.c_str(), &end);
    RZ_CHECK(!value.empty() && *end == '\0' && std::isfinite(d), "expected a finite number, found '%s'", value.c_str());
    dst = d;
  } else {
    T v{};
    RZ_CHECK(parse_integer_loose(value, v), "expected an integer in [%s, %s], found '%s'",
             std::to_string(std::numeric_limits<T>::min()).c_str(), std::to_string(std::numeric_limits<T>::max()).c_str(),
             value.c_str());
    dst = v;
  }
}

const char* toml_type_name(const toml::node& n) {  // with its article
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  if (n.is_string()) return "a string";
  if (n.is_integer()) return "an integer";
  if (n.is_floating_point()) return "a float";
  if (n.is_boolean()) return "a boolean";
  return "a date/time";
}

// Sets a field from a TOML value of its own type (an integer is also a float). Throws
// without naming the key.
template <typename T>
void from_toml(T& dst, const toml::node& node, const char* kind) {
  auto wrong = [&] {
    const std::string k = kind;
    RZ_FAIL("expected %s %s, found %s", k == "int" ? "an" : "a", k == "float" ? "number" : kind,
            toml_type_name(node));
  };
  if constexpr (std::is_same_v<T, std::string> || is_named_v<T>) {
    if (!node.is_string()) wrong();
    from_text(dst, *node.value<std::string>());
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!node.is_boolean()) wrong();
    dst = *node.value<bool>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!node.is_floating_point() && !node.is_integer()) wrong();
    dst = *node.value<double>();
    RZ_CHECK(std::isfinite(dst), "expected a finite number, found %g", dst);
  } else {
    if (!node.is_integer()) wrong();
    const int64_t v = *node.value<int64_t>();
    RZ_CHECK(std::in_range<T>(v), "%lld is out of range for this key", static_cast<long long>(v));
    dst = static_cast<T>(v);
  }
}

template <typename T>
std::string to_text(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) return v;
  else if constexpr (is_named_v<T>) return Named<T>::name(v);
  else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, double>) {  // the shortest text that reads back as v: 6e-4 is "0.0006"
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
    return std::string(buf, ec == std::errc() ? end : buf);
  }
  else return std::to_string(v);
}

// A key's value as the table and --help show it: floats in short form, "-" for empty.
std::string shown_value(const TrainConfig& cfg, const Setting& k) {
  std::string v = std::visit(
      [&](auto member) {
        const auto& x = cfg.*member;
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, double>) return strfmt("%g", x);
        else return to_text(x);
      },
      k.field);
  return v.empty() ? "-" : v;
}

}  // namespace

const char* agree_name(Agree a) {
  switch (a) {
    case Agree::undecided: return "undecided";
    case Agree::same: return "same";
    case Agree::same_files: return "same files";
    case Agree::same_kind: return "same kind";
    case Agree::same_presence: return "same presence";
    case Agree::free: return "free";
  }
  return "?";
}

const char* resume_name(Resume r) {
  switch (r) {
    case Resume::no: return "no";
    case Resume::yes: return "yes";
    case Resume::automatic: return "auto";
  }
  return "?";
}

Resume parse_resume(const std::string& name) {
  if (name == "true" || name == "1" || name == "on" || name.empty()) return Resume::yes;
  if (name == "false" || name == "0" || name == "off") return Resume::no;
  for (Resume r : kResumes)
    if (name == resume_name(r)) return r;
  RZ_FAIL("resume: expected %s, found '%s'", Named<Resume>::allowed().c_str(), name.c_str());
}

const char* precision_choice_name(PrecisionChoice p) {
  switch (p) {
    case PrecisionChoice::fp32: return "fp32";
    case PrecisionChoice::bf16: return "bf16";
    case PrecisionChoice::automatic: return "auto";
  }
  return "?";
}

PrecisionChoice parse_precision_choice(const std::string& name) {
  return parse_enum(name, kPrecisionChoices, precision_choice_name, "precision");
}

Precision resolve_precision(PrecisionChoice choice, const DeviceSpec& device, std::string* why) {
  if (choice != PrecisionChoice::automatic) return choice == PrecisionChoice::bf16 ? Precision::bf16 : Precision::fp32;
  std::string reason;
  Precision p = Precision::fp32;
  if (device.kind == DeviceKind::cuda) {
    reason = "GPU ranks: the CUDA bf16 path has not yet run on a GPU (--precision bf16 asks for it)";
  } else if (device.kind == DeviceKind::sim) {
    reason = "the simulated device: auto resolves as on a GPU";
  } else if (const std::string status = onednn_bf16_matmul_status(); status.rfind("on: ", 0) == 0) {
    p = Precision::bf16;
    reason = "this CPU has AVX512_BF16 or AMX-BF16 (" + status.substr(4) + ")";
  } else {
    reason = status.rfind("off: ", 0) == 0 ? status.substr(5) : status;
  }
  if (why != nullptr) *why = "auto: " + reason;
  return p;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> v;
    for (const auto& k : kSettings) v.push_back({k.name, kind_of(k.field), allowed_text(k), k.help, k.agree});
    return v;
  }();
  return keys;
}

void set_config_value(TrainConfig& cfg, const std::string& key, const std::string& value) {
  const Setting* k = find_setting(key);
  RZ_CHECK(k != nullptr, "unknown config key '%s' (ringzero train --help lists them)", key.c_str());
  naming_key(k->name, [&] {
    std::visit([&](auto member) { from_text(cfg.*member, value); }, k->field);
    check_allowed(cfg, *k);
  });
}

std::string get_config_value(const TrainConfig& cfg, const std::string& key) {
  const Setting* k = find_setting(key);
  RZ_CHECK(k != nullptr, "unknown config key '%s'", key.c_str());
  return std::visit([&](auto member) { return to_text(cfg.*member); }, k->field);
}

namespace config_table {

const char* setting_name(const std::string& key) {
  const Setting* k = find_setting(key);
  return k != nullptr ? k->name : nullptr;
}

void set_from_toml(TrainConfig& cfg, const char* name, const toml::node& node) {
  const Setting* k = find_setting(name);
  RZ_CHECK(k != nullptr, "unknown config key '%s'", name);
  naming_key(k->name, [&] {
    if (std::holds_alternative<Resume TrainConfig::*>(k->field) && node.is_boolean())  // resume = true / false
      cfg.resume = *node.value<bool>() ? Resume::yes : Resume::no;
    else
      std::visit([&](auto member) { from_toml(cfg.*member, node, kind_of(k->field)); }, k->field);
    check_allowed(cfg, *k);
  });
}

}  // namespace config_table


namespace {

// A key set away from its default that, with the other keys as they are, changes nothing is
// a mistake the user would not see (an eval that never runs, a trace window with no trace):
// an error naming the key and what it needs. Except where the TOML file set the key and a
// flag set one of the keys its feature hangs on (`configs/tiny.toml --sample-every 0`:
// the file's sample_tokens is not the user's mistake, the flag turned sampling off).
void check_no_idle_keys(const TrainConfig& c) {
  const TrainConfig d;
  auto from = [&](const char* key, TrainConfig::Origin o) {
    const auto it = c.origins.find(key);
    return it != c.origins.end() && it->second == o;
  };
  auto idle = [&](bool set, bool used, const char* key, const char* needs, std::initializer_list<const char*> features) {
    if (!set || used) return;
    if (from(key, TrainConfig::Origin::toml) &&
        std::any_of(features.begin(), features.end(), [&](const char* f) { return from(f, TrainConfig::Origin::flag); }))
      return;
    RZ_FAIL("%s: does nothing without %s", key, needs);
  };
  const bool val = !c.val_data.empty();
  idle(c.eval_every != d.eval_every, val, "eval_every", "val_data (validation shards to evaluate on)", {"val_data"});
  idle(c.eval_batches != d.eval_batches, val, "eval_batches", "val_data (validation shards to evaluate on)",
       {"val_data"});
  idle(c.hellaswag_every != d.hellaswag_every, !c.hellaswag.empty(), "hellaswag_every",
       "hellaswag (the eval file to score)", {"hellaswag"});
  idle(!c.hellaswag.empty(), c.hellaswag_every > 0, "hellaswag", "hellaswag_every > 0 (it is never scored)",
       {"hellaswag_every"});
  idle(c.trace_steps != d.trace_steps, !c.trace.empty(), "trace_steps", "trace (the file the timeline goes to)",
       {"trace"});
  const bool sampling = c.sample_every > 0;
  idle(c.sample_tokens != d.sample_tokens, sampling, "sample_tokens", "sample_every (no sample is drawn)",
       {"sample_every"});
  idle(c.sample_top_k != d.sample_top_k, sampling, "sample_top_k", "sample_every (no sample is drawn)",
       {"sample_every"});
  const bool saving = !c.save_dir.empty();
  idle(c.save_every != d.save_every, saving, "save_every", "save_dir (no checkpoint is written)", {"save_dir"});
  idle(c.keep != d.keep, saving, "keep", "save_dir (no checkpoint is written)", {"save_dir"});
  idle(c.overwrite, saving, "overwrite", "save_dir (there is nothing to overwrite)", {"save_dir"});
  const bool guarded = c.spike_zscore > 0;
  idle(c.max_consecutive_skips != d.max_consecutive_skips, c.skip_nonfinite || guarded, "max_consecutive_skips",
       "skip_nonfinite or spike_zscore (no step is ever skipped)", {"skip_nonfinite", "spike_zscore"});
  idle(c.spike_window != d.spike_window, guarded, "spike_window", "spike_zscore > 0 (the spike guard is off)",
       {"spike_zscore"});
  idle(c.spike_metric != d.spike_metric, guarded, "spike_metric", "spike_zscore > 0 (the spike guard is off)",
       {"spike_zscore"});
  idle(!c.gpt2_dir.empty(), c.tokenizer == "gpt2", "gpt2_dir", "tokenizer = gpt2 (only the GPT-2 tokenizer reads it)",
       {"tokenizer"});
  idle(c.transport != d.transport, c.comm == CommBackend::ring, "transport", "comm = ring (mpi and nccl bring their own)",
       {"comm"});
  const bool staged = strategy_traits(c.strategy).stages_grad_buckets();
  idle(c.buckets_in_flight != d.buckets_in_flight, staged, "buckets_in_flight",
       ("strategy " + strategies_staging_buckets("or") + " (only they stage gradient buckets)").c_str(), {"strategy"});
  idle(c.grad_shard_fp32 != d.grad_shard_fp32, staged && c.precision() == Precision::bf16, "grad_shard_fp32",
       "strategy zero2 or zero3 in precision bf16 (otherwise the owned gradient shard is fp32 or not kept)",
       {"strategy", "precision"});
}

}  // namespace

std::string strategies_staging_buckets(const char* conjunction) {
  std::vector<std::string> names;
  for (const StrategyTraits& t : kStrategyTraits)
    if (t.stages_grad_buckets()) names.emplace_back(t.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? std::string(" ") + conjunction + " " : std::string(", ")) + names[i];
  return out;
}

void check_buckets_in_flight_read(bool given, const std::string& strategy) {
  RZ_CHECK(!given || strategy == "all" || strategy_traits(parse_strategy(strategy)).stages_grad_buckets(),
           "--buckets-in-flight: does nothing with --strategy %s (only %s stage gradient buckets)", strategy.c_str(),
           strategies_staging_buckets("and").c_str());
}

void validate_config(const TrainConfig& c) {
  for (const auto& k : kSettings) naming_key(k.name, [&] { check_allowed(c, k); });
  RZ_CHECK(!c.data.empty(), "data: no training data given (--data 'DIR/train_*.bin')");
  RZ_CHECK(c.node_rank < c.nnodes, "node_rank: expected 0..%d, found %d", c.nnodes - 1, c.node_rank);
  RZ_CHECK(c.nnodes == 1 || c.master_port > 0,
           "master_port: a multi-node job needs an explicit port (every node must use the same one)");
  RZ_CHECK(!c.resuming() || !c.save_dir.empty(), "resume: needs save_dir (--save-dir DIR) to resume from");
  RZ_CHECK(c.comm_timeout <= kMaxCommTimeoutS, "comm_timeout: expected at most %g seconds (11 days), found %g",
           kMaxCommTimeoutS, c.comm_timeout);
  RZ_CHECK(!c.resuming() || !c.overwrite, "overwrite: cannot be combined with resume");
  RZ_CHECK(c.flight_entries <= (1 << 24), "flight_entries: expected at most %d collectives, found %d", 1 << 24,
           c.flight_entries);
  RZ_CHECK(c.spike_zscore == 0 || c.spike_window >= 2,
           "spike_window: the spike guard needs a window of at least 2 steps, found %d", c.spike_window);
  RZ_CHECK(c.grad_reduce_dtype != "bf16" || c.precision() == Precision::bf16,
           "grad_reduce_dtype: bf16 needs precision bf16 (an fp32 run's gradients are reduced in fp32)");
  RZ_CHECK(!c.resuming() || c.init.empty(),
           "init: cannot be combined with resume (the checkpoint already holds the model)");
  check_no_idle_keys(c);
}

std::string format_config_table(const TrainConfig& cfg, const std::map<std::string, std::string>& resolved) {
  size_t w = 0;
  for (const auto& k : kSettings) w = std::max(w, std::string(k.name).size());
  std::string out = strfmt("%-*s  %s\n", static_cast<int>(w), "key", "value");
  out.append(w, '-').append("  ").append(24, '-').append("\n");
  for (const auto& k : kSettings) {
    std::string v = shown_value(cfg, k);
    if (k.field == Field(&TrainConfig::precision_choice) && cfg.precision_choice == PrecisionChoice::automatic) {
      std::string why;
      v = std::string(precision_name(resolve_precision(cfg.precision_choice, cfg.device, &why))) + " (" + why + ")";
    }
    if (const auto it = resolved.find(k.name); it != resolved.end()) v = it->second;
    out += strfmt("%-*s  %s\n", static_cast<int>(w), k.name, v.c_str());
  }
  return out;
}

namespace {

// One row of the table as a flag of app: its name dashed, its help with the allowed values in
// brackets and its value in `shown` as the default. A bool is a bare flag (--comm-debug),
// resume a flag with an optional value (--resume, --resume=auto); the rest take a value. The
// text given lands in *given, or (given null) in the option's results only.
// `aliases`: ",--old" names CLI11 takes as the same option (add_setting_flag).
CLI::Option* add_setting_option(CLI::App& app, const Setting& k, const TrainConfig& shown, std::string* given,
                                const std::string& aliases = "") {
  const std::string flag = "--" + dashed(k.name) + aliases;
  std::string help = k.help;
  if (const std::string allowed = allowed_text(k); !allowed.empty()) help += " [" + allowed + "]";
  const bool is_bool = std::holds_alternative<bool TrainConfig::*>(k.field);
  CLI::Option* o;
  if (is_bool || std::holds_alternative<Resume TrainConfig::*>(k.field)) {  // --resume auto: parse_train_args
    const std::string name = flag + (is_bool ? "{true}" : "{yes}");
    o = given != nullptr ? app.add_flag(name, *given, help) : app.add_flag(name, std::as_const(help));
  } else {
    o = given != nullptr ? app.add_option(flag, *given, help) : app.add_option(flag, std::as_const(help));
    o->type_name(kind_of(k.field));
    if (const std::string def = shown_value(shown, k); def != "-") o->default_str(def);
  }
  return o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last one wins
}

// set_config_value for a flag: the error names the flag ("--key: expected ..."), and the key
// is recorded as set by a flag.
void set_flag_value(TrainConfig& cfg, const std::string& name, const std::string& value) {
  try {
    set_config_value(cfg, name, value);
    cfg.origins[name] = TrainConfig::Origin::flag;
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind(name + ":", 0) == 0) msg = msg.substr(name.size() + 1);
    RZ_FAIL("--%s:%s", dashed(name.c_str()).c_str(), msg.c_str());
  }
}

}  // namespace

bool parse_train_args(int argc, char** argv, TrainConfig& cfg) {
  CLI::App app{
      "Train a GPT-2 or Llama-style model on one or many ranks (ddp, zero1, zero2, zero3).\n"
      "The model is a preset (--model) with its keys overridden; --model llama-tiny, llama-d4, ...\n"
      "or smollm2-135m (or --family llama) gives RMSNorm, rotary positions, a SwiGLU MLP and\n"
      "grouped kv heads (--kv-heads) instead of GPT-2's block; docs/model.md.\n"
      "Settings come from the defaults, then CONFIG.toml (flat `key = value` lines), then the\n"
      "flags below, which win. With --nproc-per-node N > 1 ringzero starts the N ranks itself;\n"
      "under torchrun, srun or mpirun each process reads its rank from the environment (a launch\n"
      "flag beside such an environment is refused). The ranks of a job must agree on every setting\n"
      "but output paths, threads, timeouts and launch addresses (data files by name, size and header):\n"
      "rank 0 compares them at the rendezvous and a difference stops every rank, naming it.\n"
      "A key set away from its default that would change nothing (--eval-every without\n"
      "--val-data) is an error, unless CONFIG.toml set it and a flag turned its feature off\n"
      "(configs/tiny.toml's sample_tokens under --sample-every 0).",
      "ringzero train"};
  std::string config_path;
  app.add_option("config", config_path, "TOML config file (configs/tiny.toml, ...)");
  std::map<std::string, std::string> given;
  std::vector<std::pair<std::string, CLI::Option*>> opts;
  const TrainConfig defaults;
  for (const auto& k : kSettings) opts.emplace_back(k.name, add_setting_option(app, k, defaults, &given[k.name]));
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
  if (!config_path.empty()) {
    load_config_toml(cfg, config_path);
    cfg.config_path = config_path;
  }
  for (const auto& [name, o] : opts) {
    if (o->count() == 0) continue;
    set_flag_value(cfg, name, given[name]);
  }
  return true;
}

CLI::Option* add_setting_flag(CLI::App& app, TrainConfig& cfg, const char* key, std::initializer_list<const char*> aliases) {
  const Setting* k = find_setting(key);
  RZ_CHECK(k != nullptr, "add_setting_flags: no config key '%s'", key);
  std::string names;
  for (const char* a : aliases) names += std::string(",") + a;
  const std::string name = k->name;
  return add_setting_option(app, *k, cfg, nullptr, names)->each([&cfg, name](const std::string& v) {
    set_flag_value(cfg, name, v);
  });
}

void add_setting_flags(CLI::App& app, TrainConfig& cfg, std::initializer_list<const char*> keys) {
  for (const char* key : keys) add_setting_flag(app, cfg, key, {});
}

}  // namespace rz
