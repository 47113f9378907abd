// train/loop.cpp: one rank's training run (the algorithm is described in loop.h).
#include "train/loop.h"

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "base/check.h"
#include "base/checked.h"
#include "base/clock.h"
#include "base/file.h"
#include "base/printable.h"
#include "base/memory.h"
#include "base/trace.h"
#include "base/stop_signal.h"
#include "comm/factory.h"
#include "comm/debug/flight_recorder.h"
#include "data/eval_file.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "model/llmc_file.h"
#include "model/saved_model.h"
#include "model/gpt2.h"
#include "train/checkpoint.h"
#include "train/rank_setup.h"
#include "train/config_agree.h"
#include "train/config_resolved.h"
#include "train/flight.h"
#include "train/generate.h"
#include "train/hellaswag.h"
#include "train/metrics.h"
#include "train/model_source.h"
#include "train/schedule.h"
#include "train/spike_guard.h"
#include "train/step.h"
#include "train/strategy_checkpoint.h"
#include "train/tensorboard.h"
#include "train/val_loss.h"
#include "viz/timeline.h"
#include "zero/buckets.h"
#include "zero/host_collectives.h"
#include "zero/memory/formula.h"
#include "zero/memory/plan.h"
#include "zero/memory/report.h"
#include "zero/strategy.h"

namespace fs = std::filesystem;

namespace rz {
namespace {

// What every rank reports at the end of a step, in one all_gather of two floats per rank
// (gather_step_end): its peak bytes (all tags) in MiB on the model's device (the host, or a
// GPU's memory), for rank 0's progress line, and whether SIGINT or SIGTERM has reached it,
// for the stop vote. One collective instead of two per step; the signal is looked at when
// the step's gradients and update are done (before eval, sampling and saving).
struct StepEnd {
  std::vector<float> peak_mib;  // by rank
  std::vector<int> signal;      // by rank: the signal that reached it (0: none; SIGINT; SIGTERM)
};
StepEnd gather_step_end(HostCollectives& hc, DeviceKind kind) {
  const int n = hc.comm().size();
  const int sig = stop_signal_received();
  const float mine[2] = {static_cast<float>(MemoryTracker::global().peak_total(kind)) / (1024.0f * 1024.0f),
                         sig == 0 ? 0.0f : sig == SIGINT ? 1.0f : 2.0f};
  std::vector<float> all(2 * static_cast<size_t>(n));
  CommPurpose purpose("peak memory and stop vote");
  hc.all_gather(mine, all.data(), all.size());
  StepEnd e;
  for (int r = 0; r < n; ++r) {
    e.peak_mib.push_back(all[2 * static_cast<size_t>(r)]);
    const float code = all[2 * static_cast<size_t>(r) + 1];
    e.signal.push_back(code == 0.0f ? 0 : code == 1.0f ? SIGINT : SIGTERM);
  }
  return e;
}

// --tokenizer, else the tokenizer.bin `ringzero prepare` wrote beside the shards, else none.
std::unique_ptr<Tokenizer> resolve_tokenizer(const TrainConfig& cfg) {
  if (!cfg.tokenizer.empty()) return make_tokenizer(cfg.tokenizer, cfg.gpt2_dir);
  const std::string beside = (fs::path(prepared_dir_of(cfg.data)) / "tokenizer.bin").string();
  if (fs::exists(beside)) return load_llmc_tokenizer(beside);
  return nullptr;
}

GPT2Config resolve_model_config(const TrainConfig& cfg, const Tokenizer* tok) {
  GPT2Config m = override_shape(model_preset(cfg.model), config_shape_overrides(cfg));
  if (cfg.vocab <= 0 && tok != nullptr) m.vocab_size = tok->vocab_size();
  finalize_config(m);
  return m;
}

class Trainer {
 public:
  explicit Trainer(const TrainConfig& cfg) : cfg_(cfg) {}
  int run();

 private:
  void setup();
  void resume();
  std::optional<float> eval_loss(std::optional<float>* bpb);
  void eval_hellaswag(StepRecord& rec);
  void sample(int step);
  bool any_rank_stopping();
  void check_memory_fits() const;
  void check_save_dir();
  void warn_left(const std::vector<std::string>& left, const char* during);
  bool save(int step);
  void write_rank_files(const std::string& dir, int step);
  bool stop_agreed(const StepEnd& end);
  void check_precision_agrees();
  CommOptions comm_options() const;
  void count_skips(StepRecord& rec);
  int stop_after(int step);
  void memory_report();
  RunFacts run_facts() const;
  bool rank0() const { return rank_ == 0; }
  // The loss and the votes are host values: host_comm_ stages them through the device
  // where the communicator takes device buffers only (nccl).
  float all_reduce_mean(float x, const char* purpose) {
    CommPurpose p(purpose);
    host_comm_->all_reduce(&x, 1, ReduceOp::avg);
    return x;
  }

  const TrainConfig& cfg_;
  RankEnv env_;
  RankPlacement at_;  // this rank's device and backend (train/rank_setup.h); outlives comm_ and model_
  int rank_ = 0, world_ = 1, accum_ = 1;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<HostCollectives> host_comm_;  // comm_ for host values, through the model's backend
  bool shared_params_ = false;  // parameters in shared memory (ModelOptions::shared_params)
  std::unique_ptr<Tokenizer> tok_;
  GPT2Config mcfg_;
  Precision precision_ = Precision::fp32;
  Device device_;
  std::unique_ptr<GPT2> model_;
  std::unique_ptr<Strategy> strategy_;
  StrategyOptions sopts_;
  std::unique_ptr<DataLoader> train_, val_;
  std::vector<int> token_bytes_;        // per token id its bytes, for val bits per byte (empty: no tokenizer)
  std::optional<EvalFile> hellaswag_;   // --hellaswag
  std::vector<int> inputs_, targets_;  // (B, T)
  SampleRng rng_;
  int start_step_ = 0;
  bool resumed_ = false;
  int last_saved_step_ = -1;
  std::set<std::string> warned_left_;  // paths warn_left named already
  std::string save_error_;             // why the last save failed
  int stop_sig_ = 0, stop_hit_ = 0;    // stop_agreed: the signal the ranks stop on, how many it reached
  MetricsWriter metrics_;
  TensorBoardWriter tensorboard_;  // --tensorboard (rank 0)
  double tensorboard_flushed_ = 0;  // run seconds at its last flush
  std::unique_ptr<TraceWindow> timeline_;  // --trace
  // The loss-spike guard (--spike-zscore; train/spike_guard.h) and the skip bound it shares
  // with --skip-nonfinite (max_consecutive_skips).
  std::unique_ptr<SpikeGuard> spike_;
  SpikeMetric spike_metric_ = SpikeMetric::loss;
  double step_loss_ = 0.0;  // this step's loss, for the guard
  double spike_z_ = 0.0;    // the guard's z-score of this step
  int skipped_in_a_row_ = 0;  // updates skipped since the last one that trained (non-finite or spike)
  int skips_total_ = 0;
  void arm_spike_guard();
};

// The communicator the run's settings ask for, on this rank's device.
CommOptions Trainer::comm_options() const {
  CommOptions copts;
  copts.backend = cfg_.comm;
  copts.transport = cfg_.transport;
  copts.timeout_s = cfg_.comm_timeout;
  copts.debug = cfg_.comm_debug;
  copts.flight_dir = resolve_flight_dir(cfg_);
  copts.flight_entries = static_cast<size_t>(cfg_.flight_entries);
  copts.flight_watchdog_s = cfg_.flight_watchdog;
  // What every rank must share (the settings table's agree column), compared at the rendezvous.
  if (world_ > 1) copts.agreement = settings_to_agree(cfg_);
  // GPU ranks (connect_rank puts the buffers on this rank's device): each collective follows
  // the legacy default stream (cuda_stream null), which orders it after the CUDA backend's
  // (blocking) compute stream: backward's writes to a bucket, AdamW before the parameter
  // all-gather.
  return copts;
}

void Trainer::setup() {
  env_ = rank_env_from_environment();
  rank_ = env_.rank;
  world_ = env_.world_size;
  if (cfg_.threads > 0) omp_set_num_threads(cfg_.threads);
  // The OpenMP runtime would start these at the first parallel loop (and crash far beyond).
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr && cfg_.threads == 0)
    check_thread_count(std::atoll(omp), "OMP_NUM_THREADS (or set --threads)");
  precision_ = cfg_.precision();
  // The one check of the strategy against the device, on every GPU rank count (the strategy
  // would refuse the same later, after the rendezvous and the model's allocation).
  check_strategy_device(cfg_.strategy, !cfg_.device.device().is_cpu(),
                        strfmt("device %s with %d ranks", device_name(cfg_.device.device()).c_str(), world_));
  // The simulated device (--device sim, for tests) takes every branch a GPU takes: its
  // memory is device memory that host code cannot touch, its communicators nccl's and the
  // cuda transport's own code over simulated calls.
  at_ = place_rank(cfg_.device, env_, cfg_.comm);
  device_ = at_.device;
  RZ_CHECK(cfg_.init.kind != ModelSourceKind::llmc || fs::exists(cfg_.init.path), "init: %s: no such file",
           cfg_.init.path.c_str());

  // Everything that reads user files comes before the rendezvous, so a bad path fails fast
  // on every rank instead of leaving the others waiting.
  tok_ = resolve_tokenizer(cfg_);
  RZ_CHECK(tok_ != nullptr || cfg_.sample_every == 0,
           "sample_every: does nothing without a tokenizer to decode the samples (give --tokenizer, or the "
           "tokenizer.bin `ringzero prepare` writes beside the shards)");
  const bool init = !cfg_.init.empty();
  if (init) {
    mcfg_ = read_model_source_config(cfg_.init);  // the parameters are streamed in below
    // The file's shape is the model's; an explicit shape key that disagrees is a mistake.
    check_shape_keys_match(cfg_, mcfg_, "the --init model " + cfg_.init.spec);
  } else {
    mcfg_ = resolve_model_config(cfg_, tok_.get());
  }
  RZ_CHECK(cfg_.seq <= mcfg_.max_seq_len, "seq: T=%d exceeds the model's max_seq %d (set --max-seq)", cfg_.seq,
           mcfg_.max_seq_len);
  RZ_CHECK(tok_ == nullptr || tok_->vocab_size() <= mcfg_.vocab_size,
           "vocab: the model's V=%d is smaller than the tokenizer's %d", mcfg_.vocab_size, tok_->vocab_size());
  if (tok_ != nullptr) token_bytes_ = token_byte_lengths(*tok_, mcfg_.vocab_size);
  if (!cfg_.hellaswag.empty()) {  // rows within the run's T, as llm.c's EvalLoader wants them
    hellaswag_ = read_eval_file(cfg_.hellaswag);
    check_eval_fits(*hellaswag_, mcfg_, cfg_.seq, cfg_.hellaswag, "seq");
  }
  check_prepared_dir(prepared_dir_of(cfg_.data));  // not a mix of two `prepare` runs
  if (!cfg_.val_data.empty()) check_prepared_dir(prepared_dir_of(cfg_.val_data));
  train_ = std::make_unique<DataLoader>(cfg_.data, cfg_.batch, cfg_.seq, rank_, world_, cfg_.seed, true);
  train_->set_vocab_bound(mcfg_.vocab_size);
  if (!cfg_.val_data.empty()) {
    val_ = std::make_unique<DataLoader>(cfg_.val_data, cfg_.batch, cfg_.seq, rank_, world_, cfg_.seed, false);
    val_->set_vocab_bound(mcfg_.vocab_size);
  }
  const int64_t per_micro = checked_mul<int64_t>(checked_mul<int64_t>(cfg_.batch, cfg_.seq, "batch x seq"), world_,
                                                "batch x seq x ranks");
  const int64_t total = cfg_.total_batch_tokens > 0 ? cfg_.total_batch_tokens : per_micro;
  RZ_CHECK(total % per_micro == 0,
           "total_batch_tokens: %lld is not a multiple of B*T*world = %d*%d*%d = %lld", static_cast<long long>(total),
           cfg_.batch, cfg_.seq, world_, static_cast<long long>(per_micro));
  RZ_CHECK(total / per_micro <= std::numeric_limits<int>::max(),
           "total_batch_tokens: %lld / (B*T*world = %lld) = %lld micro-steps per step; at most %d",
           static_cast<long long>(total), static_cast<long long>(per_micro), static_cast<long long>(total / per_micro),
           std::numeric_limits<int>::max());
  accum_ = static_cast<int>(total / per_micro);
  checked_mul<int64_t>(total, cfg_.steps, "total_batch_tokens x steps (tokens seen by the run)");
  check_memory_fits();

  if (!cfg_.save_dir.empty()) check_save_dir();

  comm_ = connect_rank(env_, at_, comm_options());
  if (cfg_.precision_choice == PrecisionChoice::automatic && world_ > 1 && device_.is_cpu()) check_precision_agrees();

  ModelOptions mopts{precision_, cfg_.recompute, device_};
  mopts.backend = at_.backend;
  mopts.attention = cfg_.attention;
  // zero1/zero2 AllGather the updated parameters in place every step: in memory the peers
  // map, the shm transport reads each chunk with one memcpy (docs/comm.md, direct reads).
  // Host parameters only: on GPU ranks the cuda transport's host channel reads shared
  // memory too, but the parameters are device memory.
  mopts.shared_params = device_.is_cpu() && comm_->reads_shared_memory() &&
                        strategy_traits(cfg_.strategy).gathers_params_after_step();
  shared_params_ = mopts.shared_params;
  model_ = std::make_unique<GPT2>(mcfg_, mopts);
  if (init)
    read_model_source(cfg_.init, [this](size_t begin, const float* p, size_t n) { model_->set_params_f32(begin, n, p); });
  else model_->init_random(cfg_.seed);
  // Every rank starts from rank 0's parameters, as PyTorch's DDP broadcasts rank 0's module
  // state when it is built: the ranks' --seed and --init already agree (the rendezvous
  // compared them), but an --init file is compared by its header only, and another libm may
  // draw another init. One broadcast per run, before any strategy copies the parameters.
  if (world_ > 1) {
    CommPurpose purpose("initial parameters");
    comm_->broadcast(model_->params(), model_->layout().total,
                     precision_ == Precision::bf16 ? DType::bf16 : DType::f32, 0);
  }
  sopts_ = strategy_options(cfg_, precision_);  // train/step.h: the benches' too
  strategy_ = make_strategy(*model_, *comm_, sopts_);
  host_comm_ = std::make_unique<HostCollectives>(*comm_, model_->backend());
  resize_or_fail(inputs_, static_cast<size_t>(cfg_.batch) * cfg_.seq, "the input batch (B x T tokens)");
  resize_or_fail(targets_, inputs_.size(), "the target batch (B x T tokens)");
  if (cfg_.spike_zscore > 0) arm_spike_guard();
  rng_.state = cfg_.seed ^ 0x5851f42d4c957f2dull;
}

// The spike guard decides in the strategy's step gate, after the gradients are reduced and
// before AdamW, on a value every rank has (the all-reduced loss, or the norm from the same
// reduced partials); the ranks still vote, so all of them skip or none does.
void Trainer::arm_spike_guard() {
  spike_ = std::make_unique<SpikeGuard>(cfg_.spike_window, cfg_.spike_zscore);
  spike_metric_ = parse_spike_metric(cfg_.spike_metric);
  strategy_->set_step_gate([this](double grad_norm) {
    const double v = spike_metric_ == SpikeMetric::loss ? step_loss_ : grad_norm;
    float vote = spike_->is_spike(v) ? 1.0f : 0.0f;
    if (world_ > 1) {
      CommPurpose purpose("spike vote");
      host_comm_->all_reduce(&vote, 1, ReduceOp::sum);
    }
    spike_z_ = spike_->zscore(v);
    if (vote > 0) return false;
    spike_->accept(v);
    return true;
  });
}

// Before the rendezvous, on every rank: the directory is writable, and a run that does
// not resume does not mix its checkpoints with an earlier run's (whose newer steps would
// win a later --resume and prune this run's saves).
void Trainer::check_save_dir() {
  const std::vector<std::string> old = list_step_dirs(cfg_.save_dir);
  if (!cfg_.resuming() && !old.empty()) {
    RZ_CHECK(cfg_.overwrite,
             "save_dir: %s already holds %zu checkpoint(s) of an earlier run (newest %s): pass --resume to continue "
             "it, --overwrite to delete them, or another --save-dir",
             cfg_.save_dir.c_str(), old.size(), fs::path(old.back()).filename().c_str());
    if (rank_ == 0) {
      std::vector<std::string> left;  // only what ringzero wrote is deleted
      for (const auto& d : old)
        for (std::string& f : remove_checkpoint_dir(d)) left.push_back(std::move(f));
      warn_left(left, "--overwrite");
    }
  }
  probe_save_dir(cfg_.save_dir, rank_);
}

// Rank 0: what deleting checkpoints left because ringzero did not write it, named once.
void Trainer::warn_left(const std::vector<std::string>& left, const char* during) {
  std::string names;
  for (const auto& p : left)
    if (warned_left_.insert(p).second) names += (names.empty() ? "" : ", ") + printable(p);  // names found on disk
  if (!names.empty())
    std::fprintf(stderr, "ringzero: warning: %s left what ringzero did not write in %s: %s\n", during,
                 cfg_.save_dir.c_str(), names.c_str());
}

void Trainer::resume() {
  const size_t total = model_->layout().total;
  // The shape must match in full: a different one with the same parameter count (--heads 2
  // on a 4-head model, a vocab that pads to the same Vp) would load without complaint.
  const auto done = list_complete_checkpoints(cfg_.save_dir);
  if (!done.empty()) {
    const std::string mpath = done.back().second;  // the step directory: its model files
    std::optional<GPT2Config> header;
    try {
      header = read_saved_model_config(mpath);
    } catch (const Error&) {
      // A damaged model file: the loader below reports it (or --resume auto skips it).
    }
    if (header) {
      const std::string have = describe_shape(*header), want = describe_shape(mcfg_);
      RZ_CHECK(have == want,
               "resume: %s holds a model of shape %s, but this run asks for %s (give the checkpoint's shape, or no "
               "shape keys)", mpath.c_str(), have.c_str(), want.c_str());
    }
  }
  std::string notes;
  LoadedCheckpoint ck = load_resume_checkpoint(cfg_.save_dir, total, cfg_.resume == Resume::automatic, &notes, rank0());
  if (rank0() && !notes.empty()) std::printf("%s", notes.c_str());
  if (ck.dir.empty()) {
    if (rank0()) std::printf("resume auto: no checkpoint in %s yet; starting from step 0\n", cfg_.save_dir.c_str());
    return;
  }
  resumed_ = true;
  // This rank's part only, range by range from each old rank's file (no full-size arrays).
  restore_strategy_state(ck, *strategy_);
  start_step_ = static_cast<int>(ck.step);
  const int old_world = ck.manifest.world;
  if (old_world == world_) {
    const RankState& s = ck.ranks[static_cast<size_t>(rank_)];
    train_->restore(LoaderState{s.loader_epoch, s.loader_next_window});
  } else {
    // Re-derive the position (loop.h): old rank 0 had taken j windows of its share.
    const RankState& s0 = ck.ranks[0];
    const uint64_t j_old = s0.loader_next_window / static_cast<uint64_t>(old_world);
    const uint64_t j_new = j_old * static_cast<uint64_t>(old_world) / static_cast<uint64_t>(world_);
    LoaderState st{s0.loader_epoch, static_cast<uint64_t>(rank_) + j_new * static_cast<uint64_t>(world_)};
    if (j_new > train_->batches_per_epoch() * static_cast<uint64_t>(cfg_.batch)) st = {s0.loader_epoch + 1, static_cast<uint64_t>(rank_)};
    train_->restore(st);
  }
  rng_.state = ck.ranks[0].rng_state;
  if (rank0())
    std::printf("resumed from %s: step %d, written by %d rank(s) with %s%s\n", ck.dir.c_str(), start_step_, old_world,
                ck.manifest.strategy.c_str(), old_world == world_ ? "" : " (optimizer state re-sharded)");
}

// Before anything big is allocated (on CPU ranks, whose model lives in host memory): the
// planner's peak for this run, times the ranks that share this machine (LOCAL_WORLD_SIZE, set
// by ringzero's launcher and torchrun), against what the machine has left. Linux would
// otherwise hand out the buffers and the run grow until the OOM killer ends it.
void Trainer::check_memory_fits() const {
  if (!device_.is_cpu()) return;  // GPU memory is the device's: the CUDA allocator names a shortfall
  MemoryPlanInput in;
  in.cfg = mcfg_;
  in.precision = precision_;
  in.recompute = cfg_.recompute;
  in.attention = cfg_.attention;
  in.kind = cfg_.strategy;
  in.nranks = world_;
  in.batch = cfg_.batch;
  in.seq = cfg_.seq;
  in.bucket_mb = cfg_.bucket_mb;
  in.buckets_in_flight = cfg_.buckets_in_flight;
  in.grad_shard_fp32 = cfg_.grad_shard_fp32;
  in.grad_reduce_fp32 = precision_ == Precision::bf16 && cfg_.grad_reduce_dtype == "fp32";
  in.threads = omp_get_max_threads();
  int ranks_here = 1;
  if (const char* l = std::getenv("LOCAL_WORLD_SIZE"); l != nullptr && std::atoi(l) > 0) ranks_here = std::atoi(l);
  check_fits_host_memory(in, ranks_here, 0.0, "memory",
                         "a smaller --batch, --seq or model, a sharding --strategy (zero2, zero3), --recompute "
                         "layer, or fewer ranks per machine (`ringzero memory` plans any shape)");
}

// Collective: has SIGINT or SIGTERM reached any rank? For the long loops between two step
// boundaries (evaluation, zero3's sampling), so every rank leaves them at the same point.
bool Trainer::any_rank_stopping() {
  float hit = stop_signal_received() != 0 ? 1.0f : 0.0f;
  CommPurpose purpose("stop vote");
  host_comm_->all_reduce(&hit, 1, ReduceOp::sum);
  return hit > 0;
}

// The validation loss over eval_batches batches, and (where the tokenizer gives token bytes)
// its bits per byte in *bpb; nullopt when a stop signal cut it short (every rank leaves at
// the same batch: the vote is collective).
std::optional<float> Trainer::eval_loss(std::optional<float>* bpb) {
  val_->reset();
  const std::vector<int>* bytes = token_bytes_.empty() ? nullptr : &token_bytes_;
  ValSums s;
  for (int i = 0; i < cfg_.eval_batches; ++i) {
    if (i > 0 && any_rank_stopping()) return std::nullopt;
    const ValSums one = sum_val_batches(*model_, *val_, cfg_.batch, cfg_.seq, 1, bytes, inputs_, targets_);
    s.loss_sum += one.loss_sum, s.nats += one.nats, s.bytes += one.bytes;
  }
  const float loss = all_reduce_mean(static_cast<float>(s.loss_sum / cfg_.eval_batches), "val loss");
  if (bytes != nullptr) {
    float nb[2] = {static_cast<float>(s.nats), static_cast<float>(s.bytes)};
    CommPurpose purpose("val bits per byte");
    host_comm_->all_reduce(nb, 2, ReduceOp::sum);
    if (const auto b = bits_per_byte(nb[0], nb[1])) *bpb = static_cast<float>(*b);
  }
  return loss;
}

// Collective: every rank scores its share of the examples (r, r + N, ...), the counts are
// summed over the ranks.
void Trainer::eval_hellaswag(StepRecord& rec) {
  ChoiceEvalOptions o;
  o.rank = rank_;
  o.world = world_;
  o.rows = cfg_.batch;
  o.max_row = cfg_.seq;
  o.collective_forward = strategy_traits(cfg_.strategy).forward_needs_collectives;
  const ChoiceCounts c = score_choices(*model_, *hellaswag_, o);
  float v[3] = {static_cast<float>(c.examples), static_cast<float>(c.correct), static_cast<float>(c.correct_norm)};
  CommPurpose purpose("hellaswag counts");
  host_comm_->all_reduce(v, 3, ReduceOp::sum);
  rec.hellaswag_examples = static_cast<int>(v[0]);
  const double n = v[0];
  rec.hellaswag_acc = n > 0 ? v[1] / n : 0.0;
  rec.hellaswag_acc_norm = n > 0 ? v[2] / n : 0.0;
}

void Trainer::sample(int step) {
  // zero3's forward gathers parameters (collective): every rank generates the same tokens
  // (same parameters, same rng), and rank 0 prints them.
  const bool collective = strategy_traits(cfg_.strategy).forward_needs_collectives;
  if ((!rank0() && !collective) || tok_ == nullptr) return;
  const int vocab = std::min(tok_->vocab_size(), mcfg_.vocab_size);
  // sample_top_k 0 means greedy here (temperature 0); k > 0 draws from the top k at temperature 1.
  const float temperature = cfg_.sample_top_k > 0 ? 1.0f : 0.0f;
  // A stop signal ends a long sample early: on rank 0 alone by its own flag, under zero3 by a
  // vote before each token (every rank draws the same tokens in step).
  const auto stop = [&] { return collective ? any_rank_stopping() : stop_signal_received() != 0; };
  std::vector<int> out = generate_tokens(*model_, {tok_->eot()}, cfg_.sample_tokens, cfg_.seq, vocab,
                                         temperature, cfg_.sample_top_k, rng_, {}, stop);
  if (!rank0()) return;
  out.erase(out.begin());
  std::string text;
  for (int t : out) text += t == tok_->eot() ? std::string("\n<|endoftext|>\n") : tok_->decode_token(t);
  text = printable_lines(text);  // a token is bytes from tokenizer.bin: no terminal control in it
  std::printf("---- sample after step %d (%s) ----\n%s\n--------\n", step,
              cfg_.sample_top_k > 0 ? strfmt("top-%d", cfg_.sample_top_k).c_str() : "greedy", text.c_str());
  std::fflush(stdout);
}

// Collective. A save that fails on any rank (a full disk, a removed directory) is reported
// and training goes on with its state in memory; the next save tries again. Returns
// whether the checkpoint is complete.
bool Trainer::save(int step) {
  const std::string dir = checkpoint_dir_name(cfg_.save_dir, static_cast<uint64_t>(step));
  std::string error;              // this rank's own failure
  std::vector<int> failed_ranks;  // every rank's, after each all_ok
  auto attempt = [&](auto&& fn) {
    if (!error.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  CommPurpose purpose("checkpoint");
  auto all_ok = [&] {  // collective: did every rank succeed so far?
    const float mine = error.empty() ? 0.0f : 1.0f;
    std::vector<float> all(static_cast<size_t>(world_));
    host_comm_->all_gather(&mine, all.data(), all.size());
    failed_ranks.clear();
    for (int r = 0; r < world_; ++r)
      if (all[static_cast<size_t>(r)] > 0) failed_ranks.push_back(r);
    return failed_ranks.empty();
  };
  if (rank0())
    attempt([&] {
      const std::string kind = non_regular_kind(dir);  // a link or a device planted at the step's name
      RZ_CHECK(kind.empty() || kind == "a directory", "%s: exists and is %s, not a checkpoint directory", dir.c_str(),
               kind.c_str());
      fs::create_directories(dir);
      fs::remove(fs::path(dir) / "COMPLETE");  // a re-save of this step after a resume
      remove_stale_temporaries(dir);           // an earlier save of this step killed midway
    });
  if (all_ok()) attempt([&] { write_rank_files(dir, step); });
  // Fault injection for the tests: a save after a stop signal pauses midway (the ranks' state
  // files written, model.bin and the manifest not), as a large model's would, so that a
  // second signal can land in it.
  if (const char* f = std::getenv("RINGZERO_FAULT_STOP_SAVE_SLOW"); f != nullptr && stop_signal_received() != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(std::atof(f) * 1000)));
  if (all_ok()) {  // every rank takes part (zero3's gathers), whatever rank 0's disk says
    try {
      std::string model_error = save_model_file(rank0() ? dir : std::string(),
                                                *strategy_, mcfg_, precision_);
      if (error.empty()) error = model_error;
    } catch (const std::exception& e) {  // a failed collective
      if (error.empty()) error = e.what();
    }
  }
  if (all_ok() && rank0())  // every rank's part is on disk
    attempt([&] {
      write_manifest(dir, static_cast<uint64_t>(step), world_, strategy_name(cfg_.strategy), precision_name(cfg_.precision()));
      warn_left(prune_checkpoints(cfg_.save_dir, cfg_.keep), "pruning old checkpoints");
    });
  const bool ok = all_ok();
  if (ok) last_saved_step_ = step;
  // Each rank names its own failure (the launcher prints it with the rank); the others say who failed.
  if (!error.empty() && !rank0())
    std::fprintf(stderr, "ringzero: rank %d: could not write its part of checkpoint %s: %s\n", rank_, dir.c_str(),
                 error.c_str());
  std::string others;
  for (int r : failed_ranks)
    if (r != rank_) others += strfmt("%s%d", others.empty() ? "" : ", ", r);
  save_error_ = !error.empty() ? error
                               : strfmt("rank %s could not write its part (its error is printed above with its rank)",
                                        others.c_str());
  if (rank0()) {
    if (ok) std::printf("saved checkpoint %s\n", dir.c_str());
    else std::fprintf(stderr, "ringzero: warning: checkpoint at step %d NOT saved (%s); training state stays in "
                              "memory and the next save tries again\n", step, save_error_.c_str());
    std::fflush(stdout);
  }
  return ok;
}

void Trainer::write_rank_files(const std::string& dir, int step) {
  // Fault injection for the tests: the save of this step fails as a full disk would.
  if (const char* f = std::getenv("RINGZERO_FAULT_SAVE_STEP"); f != nullptr && std::atoi(f) == step)
    RZ_FAIL("%s: injected write failure (RINGZERO_FAULT_SAVE_STEP=%d)", dir.c_str(), step);
  RankState st;
  st.rank = rank_;
  st.world = world_;
  st.step = static_cast<uint64_t>(step);
  st.layout_total = model_->layout().total;
  const LoaderState ls = train_->state();
  st.loader_epoch = ls.epoch;
  st.loader_next_window = ls.next_window;
  st.rng_state = rng_.state;
  // Straight from the strategy's arrays to the file, chunk by chunk.
  save_strategy_state((fs::path(dir) / rank_state_name(rank_)).string(), *strategy_, st);
}

// Collective, once, before the model is built: `precision = auto` resolves on each rank's
// own CPU, so ranks on machines with and without bf16 units would disagree, and a bf16
// rank's buckets would meet an fp32 rank's. (GPU ranks resolve auto by device kind alone.)
void Trainer::check_precision_agrees() {
  float bf16_ranks = precision_ == Precision::bf16 ? 1.0f : 0.0f;
  CommPurpose purpose("precision vote");
  comm_->all_reduce(&bf16_ranks, 1, DType::f32, ReduceOp::sum);
  RZ_CHECK(bf16_ranks == 0 || bf16_ranks == static_cast<float>(world_),
           "precision: auto resolved to bf16 on %d of %d ranks (not every CPU has AVX512_BF16 or AMX-BF16): give "
           "--precision fp32 or bf16",
           static_cast<int>(bf16_ranks), world_);
}

// From the step's end gather: did SIGINT/SIGTERM reach any rank? Every rank decides from
// the same gathered values, so all stop after the same step, and on the signal: this
// rank's own, else SIGINT if it reached any rank, else SIGTERM. A signal that arrives
// after the gather counts at the next step's.
bool Trainer::stop_agreed(const StepEnd& end) {
  int hit = 0, sigint_ranks = 0;
  for (int sig : end.signal) {
    hit += sig != 0;
    sigint_ranks += sig == SIGINT;
  }
  if (hit == 0) return false;
  const int mine = end.signal[static_cast<size_t>(rank_)];
  stop_sig_ = mine != 0 ? mine : sigint_ranks > 0 ? SIGINT : SIGTERM;
  stop_hit_ = hit;
  return true;
}

// A signal stopped the run after `step`: save (unless that step was just saved), say which
// rank the signal reached and where to resume, and exit non-zero (128 + signal, as a shell
// reports one). A rank the signal reached says so (base/stop_signal.h's notice, which the
// launcher reads back); rank 0 says what was saved.
int Trainer::stop_after(int step) {
  const int sig = stop_sig_;
  bool saved = last_saved_step_ == step;
  if (!cfg_.save_dir.empty() && !saved) saved = save(step);
  comm_->barrier();
  std::fflush(stdout);
  if (stop_signal_received() != 0) std::fprintf(stderr, "%s\n", stop_notice(rank_, stop_signal_received()).c_str());
  if (rank0()) {
    const std::string who = world_ == 1 ? std::string() : strfmt(" (it reached %d of %d ranks)", stop_hit_, world_);
    if (saved)
      std::fprintf(stderr, "ringzero: stopped by %s%s after step %d; checkpoint %s is saved: run the same command "
                           "with --resume to continue\n", signal_name(sig).c_str(), who.c_str(), step,
                   checkpoint_dir_name(cfg_.save_dir, static_cast<uint64_t>(step)).c_str());
    else
      std::fprintf(stderr, "ringzero: stopped by %s%s after step %d; nothing saved (%s)\n", signal_name(sig).c_str(),
                   who.c_str(), step, cfg_.save_dir.empty() ? "no --save-dir" : "the save failed");
  }
  std::fflush(stderr);
  return 128 + sig;
}

void Trainer::memory_report() {
  // zero/ gathers every rank's counters and sets them beside its strategy's formula.
  CommPurpose purpose("memory report");
  const MemoryReport report = gather_memory_report(*comm_, *model_, *strategy_);
  if (!rank0()) return;
  print_memory_report(report, stdout);
  std::fflush(stdout);
  if (!cfg_.memory_report.empty()) {
    const fs::path parent = fs::path(cfg_.memory_report).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    write_file_atomic(cfg_.memory_report, memory_report_json(report).dump(2) + "\n");
  }
}

// A skipped step (non-finite loss, or a spike) counts against max_consecutive_skips; an
// accepted one resets the run of them. Fills rec.skips_total.
void Trainer::count_skips(StepRecord& rec) {
  if (rec.skipped || rec.spike) {
    ++skips_total_;
    RZ_CHECK(++skipped_in_a_row_ < cfg_.max_consecutive_skips,
             "step %d: %d steps in a row were skipped (%s; max_consecutive_skips %d): the model is not "
             "recovering, stopping",
             rec.step, skipped_in_a_row_,
             rec.spike ? strfmt("the last one a %s spike, z %.2f", cfg_.spike_metric.c_str(), rec.spike_z).c_str()
                       : strfmt("the last one's loss %s", std::isnan(rec.loss) ? "NaN" : "inf").c_str(),
             cfg_.max_consecutive_skips);
  } else {
    skipped_in_a_row_ = 0;
  }
  rec.skips_total = skips_total_;
}

// The facts the automatic keys resolved to (train/config_resolved.h), for the printed table.
RunFacts Trainer::run_facts() const {
  RunFacts f;
  f.model = mcfg_;
  f.have_tokenizer = tok_ != nullptr;
  if (cfg_.tokenizer.empty() && tok_) f.tokenizer_beside = (fs::path(prepared_dir_of(cfg_.data)) / "tokenizer.bin").string();
  f.omp_threads = omp_get_max_threads();
  f.omp_env = std::getenv("OMP_NUM_THREADS") != nullptr;
  f.world = world_;
  f.master_port = env_.master_port;
  f.transport = comm_->transport_name();
  f.precision = precision_;
  f.device = device_;
  f.flight_dir = resolve_flight_dir(cfg_);
  return f;
}

int Trainer::run() {
  setup();
  if (cfg_.resuming()) resume();
  if (rank0()) {
    std::printf("ringzero train: %d rank(s), strategy %s, transport %s, %zu parameters (L%d C%d NH%d V%d maxT%d)\n",
                world_, strategy_name(cfg_.strategy), comm_->transport_name().c_str(), model_->layout().total,
                mcfg_.num_layers, mcfg_.channels, mcfg_.num_heads, mcfg_.vocab_size, mcfg_.max_seq_len);
    std::printf("%s", format_config_table(cfg_, resolved_settings(cfg_, run_facts())).c_str());
    std::printf("tokens per step: %d (B) x %d (T) x %d (ranks) x %d (accumulation) = %lld\n", cfg_.batch,
                cfg_.seq, world_, accum_, static_cast<long long>(cfg_.batch) * cfg_.seq * world_ * accum_);
    if (shared_params_)
      std::printf("parameters in shared memory: the peers read their AllGather in place (docs/comm.md, direct reads)\n");
    if (val_ && cfg_.eval_every > 0 && token_bytes_.empty())
      std::printf("val bits per byte: n/a (no tokenizer to count the tokens' bytes: give --tokenizer, or prepare's "
                  "tokenizer.bin beside the shards)\n");
    std::fflush(stdout);
    if (!cfg_.metrics.empty()) metrics_.open(cfg_.metrics, resumed_, start_step_);
    if (!cfg_.tensorboard.empty()) {
      tensorboard_.open(cfg_.tensorboard, resumed_ ? start_step_ : -1);
      std::printf("tensorboard: %s (watch with: tensorboard --logdir %s)\n", tensorboard_.path().c_str(),
                  cfg_.tensorboard.c_str());
      std::fflush(stdout);
    }
  }
  const LrSchedule sched{cfg_.lr, cfg_.warmup, cfg_.steps, cfg_.lr_floor};
  const bool tty = rank0() && isatty(STDOUT_FILENO);
  const int log_every = std::max(1, cfg_.steps / 25);
  const double tokens_per_step = static_cast<double>(cfg_.batch) * cfg_.seq * world_ * accum_;
  const auto run_start = Clock::now();
  int steps_timed = 0;
  const TraceSteps trace_steps = cfg_.trace.empty() ? TraceSteps{} : parse_trace_steps(cfg_.trace_steps);
  timeline_ = std::make_unique<TraceWindow>(cfg_.trace, trace_steps, cfg_.steps,
                                           std::string(strategy_name(cfg_.strategy)) + " " + precision_name(cfg_.precision()),
                                           model_->backend().trace_clock(), &model_->backend());
  arm_graceful_stop(true);  // from here a signal ends the run at a step boundary
  for (int s = start_step_; s < cfg_.steps; ++s) {
    const auto t0 = Clock::now();
    set_flight_step(s + 1);  // the flight recorder's label for this step's collectives
    comm_->reset_stats();
    timeline_->begin_step(*comm_, s + 1);
    StepRecord rec;
    rec.step = s + 1;
    rec.steps = cfg_.steps;
    rec.lr = sched.at(s);
    // The loss of micro-step 0 is all-reduced before its backward: a non-finite one skips
    // the step (--skip-nonfinite) before any gradient exists. Those of micro-steps 1.. only
    // feed the step's mean and cannot be skipped, so they are all-reduced together after
    // the last backward: one collective per step for them instead of one per micro-step.
    // At 2 ranks each value is bitwise what its own all_reduce gave; from 3 ranks a value
    // outside the first shard may add the ranks in another order (the logged loss's last
    // bit; gradients are not touched).
    double loss_sum = 0;
    std::vector<float> later_losses;  // micro-steps 1..: this rank's, then every rank's mean
    for (int micro = 0; micro < accum_; ++micro) {
      { RZ_TRACE_SCOPE("data"); train_->next_batch(inputs_.data(), targets_.data()); }
      float local;
      { RZ_TRACE_SCOPE("forward"); local = model_->forward(inputs_.data(), targets_.data(), cfg_.batch, cfg_.seq); }
      if (micro == 0) {
        const float loss = all_reduce_mean(local, "loss");
        if (!std::isfinite(loss)) {
          RZ_CHECK(cfg_.skip_nonfinite, "step %d: the loss is %s at micro-step 0; stopping (--skip-nonfinite skips "
                   "such steps)", s + 1, std::isnan(loss) ? "NaN" : "inf");
          for (int rest = 1; rest < accum_; ++rest) train_->next_batch(inputs_.data(), targets_.data());
          rec.skipped = true;
          rec.grad_norm = NAN;  // no backward ran: there is no gradient to measure
          loss_sum = loss * accum_;
          break;
        }
        loss_sum += loss;
      } else {
        later_losses.push_back(local);
      }
      RZ_TRACE_SCOPE("backward");
      model_->backward(strategy_->begin_micro_step(micro, accum_), 1.0f / static_cast<float>(accum_));
      strategy_->end_micro_step();
    }
    if (!later_losses.empty()) {
      CommPurpose purpose("loss");
      host_comm_->all_reduce(later_losses.data(), later_losses.size(), ReduceOp::avg);
      for (size_t k = 0; k < later_losses.size(); ++k) {
        const float loss = later_losses[k];
        RZ_CHECK(std::isfinite(loss), "step %d: the loss is %s at micro-step %zu%s", s + 1,
                 std::isnan(loss) ? "NaN" : "inf", k + 1,
                 cfg_.skip_nonfinite ? " (inside a gradient-accumulation window: cannot be skipped)"
                                     : "; stopping (--skip-nonfinite skips such steps)");
        loss_sum += loss;
      }
    }
    rec.loss = static_cast<float>(loss_sum / accum_);
    if (!rec.skipped) {
      RZ_TRACE_SCOPE("optimizer (strategy.step: grad sync wait, clip, AdamW, param AllGather)");
      step_loss_ = rec.loss;
      const StepStats st = strategy_->step(static_cast<float>(rec.lr));
      rec.grad_norm = st.grad_norm;
      rec.comm_bytes = st.comm_bytes_sent;
      rec.comm_ms = st.comm_seconds * 1e3;
      rec.overlap = st.comm_overlapped;
      rec.spike = st.skipped;
      rec.spike_z = spike_z_;
    }
    count_skips(rec);
    const double step_s = seconds_since(t0);
    rec.step_ms = step_s * 1e3;
    rec.tokens_per_s = tokens_per_step / step_s;
    rec.tokens = static_cast<uint64_t>(tokens_per_step) * static_cast<uint64_t>(s + 1);
    const MemoryTracker& mt = MemoryTracker::global();
    // Where the model lives: on GPU ranks the host's figures would miss the model states.
    for (int t = 0; t < kNumMemTags; ++t) rec.mem_peak_bytes[t] = mt.peak(static_cast<MemTag>(t), device_.kind);
    rec.mem_peak_total = mt.peak_total(device_.kind);
    const StepEnd end = gather_step_end(*host_comm_, device_.kind);
    if (s == start_step_) memory_report();
    const bool last = s + 1 == cfg_.steps;
    // Agreed from the same gathered votes on every rank: after a stop signal the step's
    // evaluation and sample are skipped; the checkpoint is written (stop_after).
    const bool stop = !last && stop_agreed(end);
    if (!stop && val_ && cfg_.eval_every > 0 && ((s + 1) % cfg_.eval_every == 0 || last)) {
      RZ_TRACE_SCOPE("eval");
      rec.val_loss = eval_loss(&rec.val_bpb);
    }
    if (!stop && hellaswag_ && cfg_.hellaswag_every > 0 && ((s + 1) % cfg_.hellaswag_every == 0 || last)) {
      RZ_TRACE_SCOPE("hellaswag");
      eval_hellaswag(rec);
    }
    if (rank0()) {
      ++steps_timed;
      const double eta = seconds_since(run_start) / steps_timed * (cfg_.steps - s - 1);
      const std::string line = format_progress(rec, eta, end.peak_mib);
      const bool keep = (s + 1) % log_every == 0 || s == start_step_ || last || rec.val_loss || rec.hellaswag_acc ||
                        rec.skipped || rec.spike;
      std::string evals;
      if (rec.val_loss)
        evals += strfmt(" | val %.4f", *rec.val_loss) + (rec.val_bpb ? strfmt(" (%.4f bpb)", *rec.val_bpb) : " (bpb n/a)");
      if (rec.hellaswag_acc)
        evals += strfmt(" | hellaswag acc_norm %.4f acc %.4f (%d)", *rec.hellaswag_acc_norm, *rec.hellaswag_acc,
                        rec.hellaswag_examples);
      if (keep) std::printf("%s%s%s\n", tty ? "\r\033[K" : "", line.c_str(), evals.c_str());
      else if (tty) std::printf("\r\033[K%s", line.c_str());
      std::fflush(stdout);
      metrics_.write(rec);
      if (tensorboard_.is_open()) {
        tensorboard_.record(metrics_json_line(rec));
        for (size_t r = 0; r < end.peak_mib.size(); ++r)
          tensorboard_.scalar(strfmt("mem_peak_mib/rank%zu", r), rec.step, end.peak_mib[r]);
        // Out at each eval (a live TensorBoard follows the run), at the end, and every 30 s.
        if (rec.val_loss || last || seconds_since(run_start) - tensorboard_flushed_ >= 30) {
          tensorboard_.flush();
          tensorboard_flushed_ = seconds_since(run_start);
        }
      }
    }
    if (!stop && cfg_.sample_every > 0 && ((s + 1) % cfg_.sample_every == 0 || last)) sample(s + 1);
    if (!stop && !cfg_.save_dir.empty() && ((cfg_.save_every > 0 && (s + 1) % cfg_.save_every == 0) || last)) {
      RZ_TRACE_SCOPE("checkpoint");
      RZ_CHECK(save(s + 1) || !last, "the final checkpoint at step %d could not be saved: %s", s + 1,
               save_error_.c_str());
    }
    timeline_->end_step(*comm_, s + 1, rec.overlap);
    if (stop) {
      timeline_->finish(*comm_);
      return stop_after(s + 1);
    }
  }
  timeline_->finish(*comm_);
  if (rank0() && start_step_ >= cfg_.steps)
    std::printf("nothing to do: the checkpoint is at step %d and --steps is %d\n", start_step_, cfg_.steps);
  comm_->barrier();
  return 0;
}

}  // namespace

int run_training(const TrainConfig& cfg) {
  Trainer t(cfg);
  return t.run();
}

}  // namespace rz
