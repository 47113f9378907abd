// cli/cmd_prepare.cpp: `ringzero prepare`, text files -> llm.c token shards (data/prepare).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/check.h"
#include "base/stop_signal.h"
#include "data/prepare.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "train/config.h"

namespace rz {
namespace {

int run_prepare(int argc, char** argv) {
  PrepareOptions opt;
  bool quiet = false;
  TrainConfig settings;  // --gpt2-dir: the row of train's settings table
  CLI::App app{
      "Tokenize text files into llm.c token shards: OUT/train_000000.bin ..., OUT/val_000000.bin ...,\n"
      "OUT/tokenizer.bin (llm.c's format, for decoding) and OUT/meta.json. Each input file is a\n"
      "document (with --split-fortunes, each fortune); every document starts with the EOT token and\n"
      "goes whole to val or train by a seeded draw. Inputs are streamed: memory stays bounded.\n"
      "Shards named train_/val_NNNNNN.bin left in OUT by an earlier run are replaced or removed.",
      "ringzero prepare"};
  app.add_option("--input", opt.inputs,
                 "input text: files, directories (their regular files, sorted) or quoted globs")
      ->required()
      ->expected(1, -1);
  app.add_option("--tokenizer", opt.tokenizer, "byte (256 bytes + EOT) or gpt2 (needs --gpt2-dir)")
      ->capture_default_str();
  add_setting_flags(app, settings, {"gpt2_dir"});
  app.add_option("--out", opt.out_dir, "output directory (created if missing)")->required();
  add_number(app, "--val-fraction", opt.val_fraction,
                 "chance that a document goes to val; 0 puts everything in train, in input order")
      ->capture_default_str();
  add_number(app, "--shard-tokens", opt.shard_tokens, "tokens per shard file")->capture_default_str();
  add_number(app, "--seed", opt.seed, "seed of the train/val draw")->capture_default_str();
  app.add_flag("--split-fortunes", opt.split_fortunes,
               "a document per fortune (text between lines that are exactly \"%\"); skips *.dat indexes");
  app.add_flag("--quiet", quiet, "no progress lines on stderr");
  if (!parse_command_line(app, argc, argv)) return 0;
  RZ_CHECK(app.count("--gpt2-dir") == 0 || opt.tokenizer == "gpt2",
           "--gpt2-dir: does nothing without --tokenizer gpt2 (only the GPT-2 tokenizer reads it)");
  RZ_CHECK(app.count("--seed") == 0 || opt.val_fraction > 0,
           "--seed: does nothing with --val-fraction 0 (it seeds the train/val draw; every document goes to train)");
  opt.gpt2_dir = settings.gpt2_dir;
  opt.progress = !quiet;
  // SIGINT/SIGTERM stop between input chunks, the half-built shards are removed and --out
  // keeps what it held (data/prepare.cpp); the exit status is 128 + the signal.
  arm_graceful_stop(true);
  PrepareStats s;
  try {
    s = prepare_dataset(opt);
  } catch (const Error& e) {
    const int sig = stop_signal_received();
    if (sig == 0) throw;
    std::fprintf(stderr, "ringzero prepare: %s\n", e.what());
    return 128 + sig;
  }
  arm_graceful_stop(false);
  std::printf("prepare: %zu files, %.2f MB of text in %.2f s (%.1f MB/s; %.2f s CPU, %.1f MB per CPU "
              "second), tokenizer %s\n",
              s.sources.size(), s.bytes / 1e6, s.seconds, s.bytes / 1e6 / (s.seconds > 0 ? s.seconds : 1e-9),
              s.cpu_seconds, s.bytes / 1e6 / (s.cpu_seconds > 0 ? s.cpu_seconds : 1e-9), opt.tokenizer.c_str());
  std::printf("prepare: train %llu tokens in %zu shards (%llu documents), val %llu tokens in %zu shards "
              "(%llu documents) -> %s\n",
              static_cast<unsigned long long>(s.train_tokens), s.train_shards.size(),
              static_cast<unsigned long long>(s.train_docs), static_cast<unsigned long long>(s.val_tokens),
              s.val_shards.size(), static_cast<unsigned long long>(s.val_docs), opt.out_dir.c_str());
  if (opt.val_fraction > 0 && s.val_docs == 0)
    std::fprintf(stderr, "prepare: warning: --val-fraction %g drew no document for val (%llu documents)\n",
                 opt.val_fraction, static_cast<unsigned long long>(s.train_docs));
  return 0;
}

const RegisterCommand kRegister{Command{"prepare", "tokenize text files into llm.c token shards",
                                        run_prepare, 20}};

}  // namespace
}  // namespace rz
