// data/eval_file.h: llm.c's multiple-choice eval files (HellaSwag's hellaswag_val.bin, MMLU).
//
// The layout, as llm.c's dev/data/data_common.py write_evalfile writes it and its
// llmc/dataloader.h EvalLoader reads it:
//   header    256 x int32: [0] magic 20240522, [1] version 1, [2] the number of examples,
//             [3] the longest example in bytes; the rest zero
//   examples  one after another, each a stream of uint16:
//               65535 (<START_EXAMPLE>), the example's size in bytes (all its uint16,
//               these two included), its index (0, 1, 2, ... in file order), the label
//               (the correct completion), the number of completions, the context's length
//               and its tokens, then per completion its length and its tokens
// Tokens are uint16 below 65535 (the delimiter). The file is untrusted input: every count and
// length is checked against the bytes that are there before it is used, and each defect is one
// rz::Error line naming the file and the example. A file is read whole (the real HellaSwag
// validation file is 3.6 MB); at most 1 GiB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rz {

constexpr int kEvalFileMagic = 20240522;
constexpr int kEvalFileVersion = 1;
constexpr int kEvalMaxCompletions = 16;  // HellaSwag and MMLU have 4; llm.c's loader assumes 4

struct EvalExample {
  int index = 0;                                   // its position in the file
  int label = 0;                                   // the correct completion, in [0, completions)
  std::vector<uint16_t> context;                   // at least one token
  std::vector<std::vector<uint16_t>> completions;  // each at least one token
};

struct EvalFile {
  std::vector<EvalExample> examples;
  int longest_example_bytes = 0;  // header [3]
  // The longest context + completion - 1: the positions a model needs to score every
  // completion (the last completion token is only ever a target).
  int longest_row() const;
};

// Parses a whole file's bytes. path only names the file in errors.
EvalFile parse_eval_file(std::string_view bytes, const std::string& path);
// Reads and parses a file (a FIFO or directory is refused by name, before it is opened).
EvalFile read_eval_file(const std::string& path);

// Writes the format (for tests and tools): the examples, indexed in order. Atomic.
void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples);

}  // namespace rz
