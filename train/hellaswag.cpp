// train/hellaswag.cpp: multiple-choice scoring in llm.c's completion style (see hellaswag.h).
#include "train/hellaswag.h"

#include <algorithm>

#include "base/check.h"
#include "base/memory.h"

namespace rz {

namespace {

int row_length(const EvalExample& e, size_t c) { return static_cast<int>(e.context.size() + e.completions[c].size()) - 1; }

size_t examples_of(const EvalFile& f, size_t limit) {
  return limit > 0 ? std::min(limit, f.examples.size()) : f.examples.size();
}

// Rank r's examples (r, r + N, ...), packed in order into forwards of at most `rows` rows.
std::vector<std::vector<size_t>> pack(const EvalFile& f, size_t limit, int rank, int world, int rows) {
  std::vector<std::vector<size_t>> out;
  int used = 0;
  for (size_t i = static_cast<size_t>(rank); i < examples_of(f, limit); i += static_cast<size_t>(world)) {
    const int c = static_cast<int>(f.examples[i].completions.size());
    if (out.empty() || (used > 0 && used + c > rows)) {
      out.emplace_back();
      used = 0;
    }
    out.back().push_back(i);
    used += c;
  }
  return out;
}

}  // namespace

void check_eval_fits(const EvalFile& f, const GPT2Config& cfg, int max_row, const std::string& path,
                     const char* row_limit_name) {
  const int limit = max_row > 0 ? max_row : cfg.max_seq_len;
  for (const EvalExample& e : f.examples) {
    for (size_t c = 0; c < e.completions.size(); ++c) {
      RZ_CHECK(row_length(e, c) <= limit,
               "eval file %s: example %d: context %zu + completion %zu tokens need %d positions, more than %s %d",
               path.c_str(), e.index, e.context.size(), e.completions[c].size(), row_length(e, c), row_limit_name,
               limit);
      for (uint16_t t : e.completions[c])
        RZ_CHECK(t < cfg.vocab_size, "eval file %s: example %d: token %u is outside the model's vocabulary of %d",
                 path.c_str(), e.index, t, cfg.vocab_size);
    }
    for (uint16_t t : e.context)
      RZ_CHECK(t < cfg.vocab_size, "eval file %s: example %d: token %u is outside the model's vocabulary of %d",
               path.c_str(), e.index, t, cfg.vocab_size);
  }
}

ChoiceCounts score_choices(GPT2& model, const EvalFile& f, const ChoiceEvalOptions& o, std::vector<ExampleScore>* scores) {
  RZ_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "score_choices: rank %d of %d", o.rank, o.world);
  const std::vector<std::vector<size_t>> groups = pack(f, o.limit, o.rank, o.world, o.rows);
  size_t forwards = groups.size();
  if (o.collective_forward)
    for (int r = 0; r < o.world; ++r) forwards = std::max(forwards, pack(f, o.limit, r, o.world, o.rows).size());
  ChoiceCounts counts;
  std::vector<int> inputs, targets;
  for (size_t g = 0; g < forwards; ++g) {
    if (g >= groups.size()) {  // a collective forward with nothing of this rank's to score
      const int zero = 0;
      model.forward(&zero, &zero, 1, 1);
      continue;
    }
    int R = 0, T = 1;
    for (size_t i : groups[g]) {
      const EvalExample& e = f.examples[i];
      R += static_cast<int>(e.completions.size());
      for (size_t c = 0; c < e.completions.size(); ++c) T = std::max(T, row_length(e, c));
    }
    // (R, T): row j is one completion's context + completion without its last token; its
    // targets are the completion's tokens at positions ctx-1 .. ctx+len-2, 0 elsewhere.
    inputs.assign(static_cast<size_t>(R) * T, 0);
    targets.assign(inputs.size(), 0);
    int j = 0;
    for (size_t i : groups[g]) {
      const EvalExample& e = f.examples[i];
      for (const auto& comp : e.completions) {
        int* in = inputs.data() + static_cast<size_t>(j) * T;
        int* tg = targets.data() + static_cast<size_t>(j) * T;
        const size_t ctx = e.context.size();
        std::copy(e.context.begin(), e.context.end(), in);
        std::copy(comp.begin(), comp.end() - 1, in + ctx);
        std::copy(comp.begin(), comp.end(), tg + ctx - 1);
        ++j;
      }
    }
    model.forward(inputs.data(), targets.data(), R, T);
    const std::vector<float>& losses = model.position_losses();
    j = 0;
    for (size_t i : groups[g]) {
      const EvalExample& e = f.examples[i];
      ExampleScore s;
      s.index = e.index;
      s.label = e.label;
      for (const auto& comp : e.completions) {
        CompletionScore cs;
        const size_t first = static_cast<size_t>(j) * T + e.context.size() - 1;
        for (size_t p = 0; p < comp.size(); ++p) cs.loss_sum += losses[first + p];
        cs.tokens = static_cast<int>(comp.size());
        s.completions.push_back(cs);
        ++j;
      }
      for (size_t c = 1; c < s.completions.size(); ++c) {  // strict <: the first of equals wins
        const CompletionScore &a = s.completions[c], &bs = s.completions[s.pred_sum], &bm = s.completions[s.pred_mean];
        if (a.loss_sum < bs.loss_sum) s.pred_sum = static_cast<int>(c);
        if (a.loss_sum / a.tokens < bm.loss_sum / bm.tokens) s.pred_mean = static_cast<int>(c);
      }
      counts.examples += 1;
      counts.correct += s.pred_sum == s.label ? 1 : 0;
      counts.correct_norm += s.pred_mean == s.label ? 1 : 0;
      if (scores != nullptr) scores->push_back(std::move(s));
    }
  }
  return counts;
}

}  // namespace rz
