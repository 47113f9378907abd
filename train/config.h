// train/config.h: everything a training run can be told, in one struct.
//
// The defaults and their one-line meanings sit together below (llama2.c's habit); where a
// library owns a default (the strategies' bucket size, clipping and weight decay, comm's
// timeout), the field takes it from there. A
// run's configuration is resolved in three steps, each in one place:
//   1. defaults (this struct),
//   2. a TOML file (`ringzero train run.toml`): flat `key = value` lines, keys spelled as
//      the fields below (`nproc_per_node`; `nproc-per-node` is accepted too),
//   3. command-line flags of the same names (`--nproc-per-node 2`), which win.
// Each key is one row of the settings table in config.cpp (name, field, allowed values,
// help), from which the flags, the TOML keys, the per-key checks, --help and the printed
// table all come. A value of the wrong type or outside its allowed values is an error
// naming the key (and file:line for TOML) as soon as it is read; validate_config() then
// checks the resolved values against each other, separately.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "base/device_spec.h"
#include "comm/options.h"
#include "model/config.h"
#include "train/model_source.h"
#include "zero/strategy_options.h"

namespace CLI {
class App;
class Option;
}

namespace rz {

// --resume: where a run starts.
//   no         from step 0 (random init, or --init)
//   yes        from the newest complete checkpoint in save_dir; an error if it is damaged
//   automatic  from the newest intact one, or from step 0 when there is none ("auto")
enum class Resume : int { no, yes, automatic };

// --precision: what a run asks for. fp32 and bf16 are model/'s Precision; automatic ("auto")
// is bf16 where this CPU multiplies bf16 in hardware (AVX512_BF16 or AMX-BF16, through
// oneDNN: kernels/cpu/matmul_onednn.h) and fp32 elsewhere: other CPUs, GPU and simulated
// ranks (the CUDA bf16 path has not yet run on a GPU; --precision bf16 asks for it).
enum class PrecisionChoice : int { fp32, bf16, automatic };
inline constexpr PrecisionChoice kPrecisionChoices[] = {PrecisionChoice::fp32, PrecisionChoice::bf16,
                                                        PrecisionChoice::automatic};
const char* precision_choice_name(PrecisionChoice p);  // "fp32", "bf16", "auto"
// Throws "precision: expected fp32, bf16 or auto, found 'NAME'".
PrecisionChoice parse_precision_choice(const std::string& name);
// What `choice` runs as on `device` here, and (automatic) why, as one phrase: "auto: this CPU
// has AVX512_BF16 or AMX-BF16 (oneDNN 3.2.0)". Prints nothing.
Precision resolve_precision(PrecisionChoice choice, const DeviceSpec& device, std::string* why = nullptr);
inline constexpr Resume kResumes[] = {Resume::no, Resume::yes, Resume::automatic};
const char* resume_name(Resume r);  // "no", "yes", "auto"
// Reads the names, and true/1/on (or an empty value: a bare --resume) as yes, false/0/off as
// no. Throws "resume: expected no, yes or auto (or true/false), found 'NAME'".
Resume parse_resume(const std::string& name);

// The most tokens one sample may ask for (--sample-tokens in train, --tokens in sample): a
// sample recomputes a forward per token, so more is hours of a rank the others wait for.
inline constexpr int kMaxSampleTokens = 1 << 20;

struct TrainConfig {
  // --- model
  std::string model = "tiny";     // preset (tiny, d2, ..., llama-tiny, ..., smollm2-135m) the shape starts from
  std::string family = "auto";    // gpt2 | llama: the block (model/family.h); auto keeps the preset's
  int layers = 0;                 // L; 0 keeps the preset's
  int channels = 0;               // C; 0 keeps the preset's
  int heads = 0;                  // NH; 0 keeps the preset's
  int kv_heads = 0;               // NKV (llama: GQA, MQA at 1); 0 keeps the preset's
  int intermediate = 0;           // H, the gated MLP's width (llama); 0 keeps the preset's (or its default for C)
  double rope_theta = 0;          // rotary base (llama); 0 keeps the preset's
  double norm_eps = 0;            // RMSNorm epsilon (llama); 0 keeps the preset's
  std::string classifier = "auto";  // tied | untied (llama: an lm_head of its own); auto keeps the preset's
  int vocab = 0;                  // V; 0 takes the tokenizer's (data dir's tokenizer.bin / --tokenizer), else the preset's
  int max_seq = 0;                // maxT (rows of wpe; a rotary model's longest context); 0 keeps the preset's
  ModelSource init;               // a model to start from instead of random init (.bin, checkpoint dir, hf:DIR)
  PrecisionChoice precision_choice = PrecisionChoice::fp32;  // the key `precision`: fp32 | bf16 | auto (above)
  Precision precision() const { return resolve_precision(precision_choice, device); }  // what runs
  DeviceSpec device;              // cpu | cuda (rank r: GPU LOCAL_RANK mod the visible ones) | cuda:K | sim[:K] (tests)
  Recompute recompute = Recompute::none;          // what backward recomputes (model/config.h)
  Attention attention = Attention::materialized;  // what attention keeps for backward (model/config.h)
  int threads = 0;                // OpenMP threads per rank; 0 = the launcher's / OMP_NUM_THREADS

  // --- data
  std::string data;               // train shards: glob or comma list (llm.c format)
  std::string val_data;           // validation shards; empty = no validation
  std::string tokenizer;          // byte | gpt2 | path to tokenizer.bin; empty = tokenizer.bin beside the data
  std::string gpt2_dir;           // directory with encoder.json and vocab.bpe (tokenizer = gpt2)

  // --- batch and schedule
  int steps = 100;                // optimizer steps to train (in total, counting resumed ones)
  int batch = 4;                  // B: sequences per micro-batch per rank
  int seq = 64;                   // T: tokens per sequence
  int64_t total_batch_tokens = 0; // tokens per optimizer step over all ranks; 0 = B*T*world (no accumulation)
  double lr = 6e-4;               // peak learning rate
  int warmup = 0;                 // linear warmup steps
  double lr_floor = 0.0;          // cosine decay ends at lr * lr_floor
  double weight_decay = StrategyOptions{}.adamw.weight_decay;  // AdamW decoupled weight decay (matrices and embeddings)
  double grad_clip = StrategyOptions{}.grad_clip;  // clip the global grad norm to this; 0 disables
  uint64_t seed = 1337;           // model init, data order and sampling
  bool skip_nonfinite = false;    // skip a step whose loss is NaN/inf instead of stopping
  int max_consecutive_skips = 10; // steps skipped in a row before the run stops (skip_nonfinite; the one
                                  // bound a loss-spike guard shares)
  double spike_zscore = 0.0;      // loss-spike guard: skip the update of a step this many std above the window's mean; 0 = off
  int spike_window = 100;         // steps of the spike guard's moving window (accepted steps only)
  std::string spike_metric = "loss";  // what the spike guard watches: loss | grad_norm

  // --- distribution
  StrategyKind strategy = StrategyKind::ddp;
  int nproc_per_node = 1;         // ranks to launch on this node (> 1: ringzero is its own launcher)
  int nnodes = 1;                 // nodes in the job
  int node_rank = 0;              // this node's index
  std::string master_addr = "127.0.0.1";  // rendezvous host (rank 0's node)
  int master_port = 0;            // rendezvous port; 0 = pick a free one (single node)
  CommTransport transport = CommOptions{}.transport;  // auto | shm | tcp (between processes)
  CommBackend comm = CommOptions{}.backend;  // ring (CPU or GPU ranks) | mpi (under mpirun; host buffers only) | nccl (GPU ranks)
  double comm_timeout = CommOptions{}.timeout_s;  // seconds any collective may wait for a peer
  bool comm_debug = false;        // fingerprint every collective across ranks (RINGZERO_COMM_DEBUG=1)
  std::string flight_dir;         // flight records (comm/debug/flight_recorder.h); empty: <save_dir>/flight, else a private temp dir
  int flight_entries = static_cast<int>(kFlightEntriesDefault);  // collectives each rank's flight recorder keeps; 0 = off
  double flight_watchdog = 0.0;   // dump the flight record when a collective made no progress this long (s); 0 = off
  double bucket_mb = StrategyOptions{}.bucket_mb;           // gradient bucket size in MiB
  int buckets_in_flight = StrategyOptions{}.buckets_in_flight;  // zero2: staging buckets reduce-scattering at once
  bool grad_shard_fp32 = StrategyOptions{}.grad_shard_fp32;  // zero2 in bf16: owned gradient shard in fp32 instead of bf16
  std::string grad_reduce_dtype = "auto";  // auto (the precision's) | bf16 | fp32: what gradient buckets travel and are summed in

  // --- checkpoints
  std::string save_dir;           // where step_NNNNNNNN/ checkpoint directories go; empty = none
  int save_every = 0;             // checkpoint every k steps (and at the end); 0 = only at the end
  int keep = 0;                   // keep the newest N complete checkpoints; 0 = keep all
  Resume resume = Resume::no;     // start from a checkpoint in save_dir (Resume above)
  bool overwrite = false;         // a fresh run may delete the checkpoints already in save_dir
  bool resuming() const { return resume != Resume::no; }

  // --- evaluation, sampling, reporting
  int eval_every = 0;             // validation loss every n steps (and at the end); 0 = never
  int eval_batches = 4;           // (B, T) validation batches per rank per evaluation
  std::string hellaswag;          // llm.c eval file (hellaswag_val.bin) scored every hellaswag_every steps; empty = none
  int hellaswag_every = 0;        // HellaSwag acc / acc_norm every n steps (and at the end); 0 = never
  int sample_every = 0;           // rank 0 prints a text sample every m steps (and at the end); 0 = never
  int sample_tokens = 64;         // tokens per sample
  int sample_top_k = 0;           // 0 = greedy; k > 0 samples from the k most likely tokens
  std::string metrics;            // JSONL file, one object per step; empty = none
  std::string tensorboard;        // directory for a TensorBoard event file (rank 0); empty = none
  std::string memory_report;      // JSON file for the per-rank memory report after step 1; empty = none
  std::string trace;              // Chrome trace-event JSON timeline of --trace-steps (rank 0 writes it); empty = none
  std::string trace_steps = "2:4"; // A:B, the 1-based steps the trace covers

  // Not keys: the TOML file the settings came from (an input the outputs must not replace),
  // and where each key's value came from (a key absent here holds its default). The idle-key
  // rule of validate_config reads the origins: a key the TOML file set is not idle when a
  // flag turned its feature off (configs/tiny.toml's sample_tokens under --sample-every 0).
  std::string config_path;
  enum class Origin : int { toml, flag };
  std::map<std::string, Origin> origins;  // key (TOML spelling) -> the step that last set it
};

// Whether the ranks of one job must share a key's value: the settings table's `agree`
// column, decided row by row (a row that leaves it `undecided` does not compile: a
// static_assert in config.cpp). At the rendezvous every rank publishes what its `same*` keys
// hold and rank 0 compares (train/config_agree.h, comm/rendezvous/agreement.h); a difference
// stops every rank at once, naming the key and the ranks.
enum class Agree : int {
  undecided,      // not decided yet: refused at compile time
  same,           // the value, as text (the model, the strategy, the optimizer's numbers, the seed, ...)
  same_files,     // the files it names, by base name, size and a hash of their first 4 KiB; the paths may differ
  same_kind,      // device: the kind (cpu, cuda, sim) must agree; the GPU index may differ from node to node
  same_presence,  // an output every rank takes part in producing (trace): on every rank or none; paths may differ
  free,           // may differ per rank: output paths, threads, timeouts, where the launcher listens
};
const char* agree_name(Agree a);  // "same", "same files", "same kind", "same presence", "free", "undecided"

// One configuration key: its name (TOML spelling), kind, allowed values, help line and
// whether the ranks of a job must agree on it.
struct ConfigKey {
  std::string name;     // "nproc_per_node"
  std::string kind;     // "int", "float", "bool", "string"
  std::string allowed;  // "ddp, zero1 or zero2", "> 0", ...; empty: any value of the kind
  std::string help;
  Agree agree = Agree::undecided;
};
const std::vector<ConfigKey>& config_keys();

// Sets one key from its text form (a flag's value) and checks it against the key's allowed
// values. Throws "key: expected ..., found ..." naming the key and the value.
void set_config_value(TrainConfig& cfg, const std::string& key, const std::string& value);
// Current value of a key as text, in the form set_config_value reads: its inverse, which the
// tests use to round-trip every key (the printed table shows floats shorter, empty as "-").
std::string get_config_value(const TrainConfig& cfg, const std::string& key);

// Applies a TOML file, recording each key it sets as Origin::toml. Throws "FILE:LINE: key: ..."
// for unknown keys and bad values.
void load_config_toml(TrainConfig& cfg, const std::string& path);

// Checks the resolved values against each other. Throws naming the key. A key set away from
// its default that changes nothing (eval_every without val_data) is an error too, unless the
// TOML file set it and a flag set the key that turns its feature off.
void validate_config(const TrainConfig& cfg);

// The configuration as a two-column table (rank 0 prints it at start). A key that the run
// resolved from an automatic value (vocab 0, threads 0, transport auto, ...) shows what it
// resolved to and from where, as `resolved` gives it (key -> "257 (from the tokenizer)");
// precision auto shows its choice and why on its own.
std::string format_config_table(const TrainConfig& cfg, const std::map<std::string, std::string>& resolved = {});

// The shape keys of a config as overrides of its preset (model/config.h).
ShapeOverrides config_shape_overrides(const TrainConfig& tc);

// A model read from a file (`what`: "the --init model M.bin") against the config's shape keys:
// a key set (not 0 / auto) that disagrees is an error naming it.
void check_shape_keys_match(const TrainConfig& tc, const ModelConfig& m, const std::string& what);

// The model shape a training config describes, for the benchmarks (bench-step,
// bench-strategies): its preset with the config's overrides; a vocab of 0 takes the
// tokenizer.bin `ringzero prepare` wrote beside the config's data. Not finalized. Defined in
// config_shape.cpp, so config.cpp needs nothing from data/.
GPT2Config config_model_shape(const TrainConfig& tc);

// Adds the settings table's rows `keys` (TOML spelling: "layers", "precision", "device", ...)
// to another subcommand's flags, as `ringzero train` has them (--layers, --precision, ...):
// the same help, allowed values and checks, cfg's values shown as the defaults. Each flag
// given sets cfg while app parses, through set_config_value; a bad value throws
// "--key: expected ..., found ...". A key the table lacks throws at once.
void add_setting_flags(CLI::App& app, TrainConfig& cfg, std::initializer_list<const char*> keys);
// One row, with the other names a subcommand's flag had before it took the table's row
// (`aliases`: {"--nproc"} beside --nproc-per-node): the same option under every name, the
// table's name first in --help. Returns the option (count() counts every name).
CLI::Option* add_setting_flag(CLI::App& app, TrainConfig& cfg, const char* key,
                              std::initializer_list<const char*> aliases);

// buckets_in_flight does something only with a strategy that stages gradient buckets
// (StrategyTraits::stages_grad_buckets): the one statement of that rule, for
// validate_config's idle keys and the subcommands that take --buckets-in-flight beside a
// --strategy that may be "all" (which includes such a strategy). `given`: the flag was set.
// Throws "--buckets-in-flight: does nothing with --strategy ddp (only zero2 and zero3 stage
// gradient buckets)".
void check_buckets_in_flight_read(bool given, const std::string& strategy);
// The strategies that stage gradient buckets, from the traits table: "zero2 and zero3"
// (`conjunction` "and"), "zero2 or zero3".
std::string strategies_staging_buckets(const char* conjunction);

// Parses `ringzero train [CONFIG.toml] [--key value ...]` (argv[0] = "train"), recording the
// keys its flags set as Origin::flag. Returns false when --help was printed. Unknown flags
// and bad values throw.
bool parse_train_args(int argc, char** argv, TrainConfig& cfg);

}  // namespace rz
