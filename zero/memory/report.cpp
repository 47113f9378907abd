#include "zero/memory/report.h"

#include <cstring>

#include "zero/host_collectives.h"

#include "base/check.h"

namespace rz {

RankMemoryCounters local_rank_memory(Backend& backend) {
  const MemoryTracker& mt = MemoryTracker::global();
  const DeviceKind kind = backend.device().kind;
  RankMemoryCounters m;
  for (int i = 0; i < kNumMemTags; ++i) {
    m.current[i] = mt.current(static_cast<MemTag>(i), kind);
    m.peak[i] = mt.peak(static_cast<MemTag>(i), kind);
  }
  m.peak_total = mt.peak_total(kind);
  m.host_peak_total = mt.peak_total(DeviceKind::cpu);
  size_t used = 0, total = 0;
  if (backend.driver_memory(&used, &total)) {
    m.driver_used = used;
    m.driver_total = total;
  }
  return m;
}

MemoryReport gather_memory_report(Communicator& comm, GPT2& model, const Strategy& strategy) {
  MemoryReport rep;
  rep.device = model.device();
  rep.kind = strategy.kind();
  rep.precision = model.precision();
  rep.nranks = comm.size();
  rep.transport = comm.transport_name();
  const BucketPlan& plan = strategy.bucket_plan();
  const StagingPool pool = strategy.grad_sync().staging_pool();
  rep.num_params = model.layout().total;
  rep.num_buckets = plan.buckets.size();
  rep.pool_size = pool.general;
  rep.wte_bucket_bytes = pool.reserved_elems * precision_bytes(rep.precision);
  rep.formula = ringzero_formula(rep.kind, rep.precision, rep.nranks, strategy.options().grad_shard_fp32);
  rep.paper = paper_formula(rep.kind, rep.precision, rep.nranks);
  rep.expected = strategy.state_bytes();  // each part's own count
  rep.wide_buffers = strategy.grad_sync().wide_pool().buffers;
  rep.recompute = model.recompute();
  rep.activations = model.activation_capacity_bytes();

  // 20 uint64 per rank, as 40 fp32 words.
  constexpr size_t kWords = sizeof(RankMemoryCounters) / sizeof(float);
  static_assert(sizeof(RankMemoryCounters) == (2 * kNumMemTags + 4) * sizeof(uint64_t));
  std::vector<RankMemoryCounters> all(rep.nranks);
  all[comm.rank()] = local_rank_memory(model.backend());
  // Host values: through a device buffer where the communicator wants one (nccl).
  HostCollectives hc(comm, model.backend());
  hc.all_gather(reinterpret_cast<const float*>(&all[comm.rank()]), reinterpret_cast<float*>(all.data()),
                kWords * rep.nranks);
  rep.ranks = std::move(all);
  return rep;
}

static std::string mb(double bytes) { return strfmt("%.2f MB", bytes / 1e6); }

void print_memory_report(const MemoryReport& r, FILE* out) {
  std::fprintf(out, "memory after step 1: %s, %s, N = %d (%s), %zu params, %zu buckets, recompute %s, on %s\n",
               strategy_name(r.kind), precision_name(r.precision), r.nranks, r.transport.c_str(),
               r.num_params, r.num_buckets, recompute_name(r.recompute), device_name(r.device).c_str());
  if (r.transport == "thread")
    std::fprintf(out, "  (thread ranks share one process: every column is the sum over ranks)\n");
  std::fprintf(out, "  formula (bytes/param): params %.3g + grads %.3g + master %.3g + m %.3g + v %.3g = %.4g"
               "   [ZeRO paper: %.4g]\n",
               r.formula.params, r.formula.grads, r.formula.master, r.formula.adam_m, r.formula.adam_v,
               r.formula.total(), r.paper.total());
  const StrategyTraits& t = strategy_traits(r.kind);
  if (t.shards_grads)
    std::fprintf(out, "  %s staging (comm): %d buckets in flight + 1 reserved for the wte bucket (%s)\n",
                 strategy_name(r.kind), r.pool_size, mb(double(r.wte_bucket_bytes)).c_str());
  if (r.expected.wide > 0)
    std::fprintf(out, "  fp32 gradient reduction (comm): %d reduce buffers of the largest bucket (%s)\n", r.wide_buffers,
                 mb(double(r.expected.wide)).c_str());
  else if (r.precision == Precision::bf16)
    std::fprintf(out, "  gradient reduction in bf16 (--grad-reduce-dtype fp32 sums in fp32)\n");
  if (t.shards_params)
    std::fprintf(out, "  %s params: owned shard %s + gathered units in flight %s (%d layers + the embeddings)\n",
                 strategy_name(r.kind), mb(double(r.expected.params - r.expected.gathered)).c_str(), mb(double(r.expected.gathered)).c_str(),
                 kUnitsInFlight);
  std::fprintf(out, "  %-12s", "tag");
  for (int k = 0; k < r.nranks; ++k) std::fprintf(out, "  %24s", strfmt("rank %d cur / peak", k).c_str());
  std::fprintf(out, "  %14s\n", "formula/rank");
  const size_t expect[kNumMemTags] = {r.expected.params, r.expected.grads, r.expected.master,
                                      r.expected.adam_m, r.expected.adam_v, r.activations, r.expected.staging + r.expected.wide, 0};
  for (int i = 0; i < kNumMemTags; ++i) {
    std::fprintf(out, "  %-12s", mem_tag_name(static_cast<MemTag>(i)));
    for (const RankMemoryCounters& m : r.ranks)
      std::fprintf(out, "  %24s", (mb(double(m.current[i])) + " / " + mb(double(m.peak[i]))).c_str());
    bool has_formula = i != static_cast<int>(MemTag::workspace);
    std::string f = has_formula ? mb(double(expect[i])) : std::string("-");
    if (i == static_cast<int>(MemTag::comm)) f += " +transport";
    std::fprintf(out, "  %14s\n", f.c_str());
  }
  std::fprintf(out, "  %-12s", "peak total");
  for (const RankMemoryCounters& m : r.ranks) std::fprintf(out, "  %24s", mb(double(m.peak_total)).c_str());
  std::fprintf(out, "  %14s\n", mb(double(r.expected.total())).c_str());
  if (r.device.kind == DeviceKind::cpu) return;
  // On a GPU the table counts device bytes; the driver's figure includes what the tracker
  // cannot see (the CUDA context, library workspaces, other processes on the device).
  std::fprintf(out, "  %-12s", "driver used");
  for (const RankMemoryCounters& m : r.ranks)
    std::fprintf(out, "  %24s", (mb(double(m.driver_used)) + " of " + mb(double(m.driver_total))).c_str());
  std::fprintf(out, "  %14s\n", r.device.kind == DeviceKind::sim ? "(sim arena)" : "(cudaMemGetInfo)");
  std::fprintf(out, "  %-12s", "host peak");
  for (const RankMemoryCounters& m : r.ranks) std::fprintf(out, "  %24s", mb(double(m.host_peak_total)).c_str());
  std::fprintf(out, "\n");
}

nlohmann::json memory_report_json(const MemoryReport& r) {
  using nlohmann::json;
  auto per_param = [](const PerParamBytes& f) {
    return json{{"params", f.params}, {"grads", f.grads}, {"master", f.master},
                {"adam_m", f.adam_m}, {"adam_v", f.adam_v}, {"total", f.total()}};
  };
  json j;
  j["strategy"] = strategy_name(r.kind);
  j["precision"] = precision_name(r.precision);
  j["nranks"] = r.nranks;
  j["transport"] = r.transport;
  j["device"] = device_name(r.device);
  j["num_params"] = r.num_params;
  j["num_buckets"] = r.num_buckets;
  j["buckets_in_flight"] = r.pool_size;
  j["wte_bucket_staging_bytes"] = r.wte_bucket_bytes;
  j["grad_reduce_dtype"] = r.expected.wide > 0 || r.precision == Precision::fp32 ? "fp32" : "bf16";
  j["fp32_reduce_buffers"] = r.wide_buffers;
  j["bytes_per_param"] = per_param(r.formula);
  j["bytes_per_param_paper"] = per_param(r.paper);
  j["expected_bytes"] = {{"params", r.expected.params}, {"grads", r.expected.grads},
                         {"master", r.expected.master}, {"adam_m", r.expected.adam_m},
                         {"adam_v", r.expected.adam_v}, {"comm_staging", r.expected.staging},
                         {"comm_fp32_reduce", r.expected.wide},
                         {"params_gathered", r.expected.gathered},
                         {"total", r.expected.total()}, {"activations", r.activations}};
  j["recompute"] = recompute_name(r.recompute);
  json ranks = json::array();
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    json cur, peak;
    for (int i = 0; i < kNumMemTags; ++i) {
      cur[mem_tag_name(static_cast<MemTag>(i))] = r.ranks[k].current[i];
      peak[mem_tag_name(static_cast<MemTag>(i))] = r.ranks[k].peak[i];
    }
    json rank = {{"rank", k}, {"current", cur}, {"peak", peak}, {"peak_total", r.ranks[k].peak_total}};
    if (r.device.kind != DeviceKind::cpu) {
      rank["driver_used"] = r.ranks[k].driver_used;
      rank["driver_total"] = r.ranks[k].driver_total;
      rank["host_peak_total"] = r.ranks[k].host_peak_total;
    }
    ranks.push_back(rank);
  }
  j["ranks"] = ranks;
  return j;
}

}  // namespace rz
