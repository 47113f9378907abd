// cli/cmd_sample.cpp: `ringzero sample`, text from a saved model.
// Generation is train/generate.h's, the same sampler training prints its samples with.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <utility>
#include <unistd.h>
#include <vector>

#include "base/check.h"
#include "base/printable.h"
#include "data/tokenizer.h"
#include "model/llmc_file.h"
#include "model/gpt2.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "train/config.h"
#include "train/generate.h"
#include "train/model_source.h"
#include "train/rank_setup.h"

namespace rz {
namespace {

int run_sample(int argc, char** argv) {
  std::string model_path, tokenizer_spec = "byte", prompt;
  TrainConfig settings;  // --gpt2-dir, --seed, --precision and --device: rows of train's settings table
  int n_tokens = 64, top_k = 0;
  float temperature = 1.0f;
  int window = 0;
  CLI::App app{
      "Generate text from a model: encode --prompt (an empty prompt starts from the end-of-text\n"
      "token), then draw --tokens tokens one at a time, each from the softmax of the last position's\n"
      "logits divided by --temperature, restricted to the --top-k most likely (0 = all). Temperature 0\n"
      "is greedy. The prompt and the continuation are printed to stdout as they are produced.\n"
      "A KV cache keeps each layer's keys and values: the prompt is one forward and each new token\n"
      "one position's forward, while the context fits --window (GQA models keep NKV heads' keys and\n"
      "values, not NH). Past the window every position moves (GPT-2's learned positions, Llama's\n"
      "rotations), so the cache no longer applies and every token recomputes the whole window.",
      "ringzero sample"};
  app.add_option("--model", model_path, std::string("the model: ") + kModelSourceHelp)->required();
  app.add_option("--tokenizer", tokenizer_spec, "byte, gpt2 (with --gpt2-dir) or a path to an llm.c tokenizer.bin")
      ->capture_default_str();
  add_setting_flags(app, settings, {"gpt2_dir"});
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  add_number(app, "--tokens", n_tokens, "number of tokens to generate")->capture_default_str()->check(CLI::Range(0, kMaxSampleTokens));
  add_number(app, "--temperature", temperature, "softmax temperature (0 = greedy)")->capture_default_str()->check(CLI::Range(0.0f, 100.0f));
  add_number(app, "--top-k", top_k, "sample among the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  add_setting_flags(app, settings, {"seed"});
  add_number(app, "--window", window,
                 "context in tokens (0: the model's maxT; the KV cache serves the first this many); use the seq it "
             "was trained at")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  add_setting_flags(app, settings, {"precision", "device"});
  if (!parse_command_line(app, argc, argv)) return 0;
  RZ_CHECK(app.count("--gpt2-dir") == 0 || tokenizer_spec == "gpt2",
           "--gpt2-dir: does nothing without --tokenizer gpt2 (only the GPT-2 tokenizer reads it)");
  if (temperature == 0)  // greedy: every draw is the most likely token
    for (const char* flag : {"--top-k", "--seed"})
      RZ_CHECK(app.count(flag) == 0, "%s: does nothing with --temperature 0 (greedy decoding draws nothing)", flag);
  const ModelSource source = parse_model_source(model_path);
  ModelFile mf;
  mf.params = read_model_source_params(source, &mf.cfg);
  auto tok = make_tokenizer(tokenizer_spec, settings.gpt2_dir);
  RZ_CHECK(tok->vocab_size() <= mf.cfg.vocab_size,
           "--tokenizer %s has %d tokens but the model %s only %d: they do not belong together",
           tokenizer_spec.c_str(), tok->vocab_size(), model_path.c_str(), mf.cfg.vocab_size);
  ModelOptions mo;
  mo.precision = settings.precision();
  const RankPlacement at = place_rank(settings.device, RankEnv{}, CommBackend::ring);  // one process
  mo.device = at.device;
  mo.backend = at.backend;
  GPT2 model(mf.cfg, mo);
  model.set_params_f32(mf.params.data());

  std::vector<int> tokens = prompt.empty() ? std::vector<int>{tok->eot()} : tok->encode(prompt);
  // A token's bytes come from the tokenizer file: on a terminal, control characters are
  // shown escaped (base/printable.h); into a pipe or file the text goes byte for byte.
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  PrintableStream shown;
  auto put = [&](const std::string& text) {
    const std::string out = tty ? shown.feed(text) : text;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  };
  put(prompt);
  SampleRng rng{settings.seed};
  RZ_CHECK(window <= mf.cfg.max_seq_len, "--window %d: the model %s has only %d positions (maxT)", window,
           model_path.c_str(), mf.cfg.max_seq_len);
  generate_tokens(model, std::move(tokens), n_tokens, window > 0 ? window : mf.cfg.max_seq_len, tok->vocab_size(), temperature, top_k, rng,
                  [&](int next) { put(tok->decode_token(next)); });
  if (tty) std::fputs(shown.finish().c_str(), stdout);
  std::fputs("\n", stdout);
  return 0;
}

const RegisterCommand kRegister{Command{"sample", "generate text from a saved model", run_sample, 61}};

}  // namespace
}  // namespace rz
