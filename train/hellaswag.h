// train/hellaswag.h: multiple-choice evaluation (HellaSwag) in llm.c's completion style.
//
// For each example every completion is scored by the model's loss on the completion's
// tokens given the context: the row is context + completion, the loss is taken only at the
// positions whose target is a completion token (the last context token predicts the first
// completion token, and so on), as llm.c's dev/data/hellaswag.py and its EvalLoader do. acc
// picks the completion with the least summed loss, acc_norm the least mean loss (summed /
// its token count); a tie goes to the first, as torch's argmin and llm.c's loop. llm.c reports
// acc_norm 0.2955 (acc 0.2859) for OpenAI's GPT-2 124M on the 10,042 validation examples.
//
// Rows are packed into forwards of at most `rows` rows (whole examples only; at least one
// example), each as long as its longest row, padded with token 0 whose losses are not read.
// Ranks split the examples: rank r scores examples r, r + N, r + 2N, ...; the counts are
// summed over ranks by the caller. Where the forward is collective (ZeRO-3 gathers
// parameters in it) every rank runs the same number of forwards: a rank with fewer examples
// runs one-position forwards for the rest.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "data/eval_file.h"
#include "model/gpt2.h"

namespace rz {

struct CompletionScore {
  double loss_sum = 0;  // nats over its tokens
  int tokens = 0;
};

struct ExampleScore {
  int index = 0, label = 0;
  std::vector<CompletionScore> completions;
  int pred_sum = 0;   // argmin of loss_sum (acc)
  int pred_mean = 0;  // argmin of loss_sum / tokens (acc_norm)
};

// Counts, summed over ranks by the caller (floats: they travel through the communicator).
struct ChoiceCounts {
  double examples = 0, correct = 0, correct_norm = 0;
  double acc() const { return examples > 0 ? correct / examples : 0.0; }
  double acc_norm() const { return examples > 0 ? correct_norm / examples : 0.0; }
};

struct ChoiceEvalOptions {
  int rank = 0, world = 1;
  size_t limit = 0;       // score examples [0, limit) only (0: all)
  int rows = 16;          // rows per forward (raised to one example's completions)
  int max_row = 0;        // the longest row a forward may have (0: the model's maxT)
  bool collective_forward = false;  // every rank runs the same number of forwards
};

// Throws, naming `path` and the example, when an example has a token the model's vocabulary
// lacks or a row longer than max_row (0: the model's maxT) positions.
void check_eval_fits(const EvalFile& f, const GPT2Config& cfg, int max_row, const std::string& path,
                     const char* row_limit_name);

// Scores this rank's examples. scores, when given, gets each one's detail in order.
ChoiceCounts score_choices(GPT2& model, const EvalFile& f, const ChoiceEvalOptions& o,
                           std::vector<ExampleScore>* scores = nullptr);

}  // namespace rz
