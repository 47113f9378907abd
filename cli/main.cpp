// ringzero: a standalone trainer for small GPTs with its own ring collectives.
// This file only dispatches to the subcommands registered in cli/cmd_*.cpp.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "base/check.h"
#include "base/printable.h"
#include "base/stop_signal.h"
#include "cli/command.h"

namespace rz {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace rz

static void print_usage(FILE* out) {
  auto cmds = rz::command_registry();
  std::sort(cmds.begin(), cmds.end(), [](const rz::Command& a, const rz::Command& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  std::fprintf(out,
               "ringzero: train small GPTs on one or many ranks with DDP, ZeRO-1 or ZeRO-2\n"
               "over ringzero's own ring collectives.\n\n"
               "usage: ringzero <command> [options]   (ringzero <command> --help for each)\n\n"
               "commands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_usage(stdout);
    return argc < 2 ? 2 : 0;
  }
  const auto& cmds = rz::command_registry();
  auto it = std::find_if(cmds.begin(), cmds.end(),
                         [&](const rz::Command& c) { return c.name == argv[1]; });
  if (it == cmds.end()) {
    std::fprintf(stderr, "ringzero: error: unknown command '%s' (ringzero --help lists them)\n",
                 rz::printable(argv[1]).c_str());
    return 2;
  }
  // SIGINT/SIGTERM: cleanups (shm segments) and then the default action, except inside the
  // training loop, which finishes its step and saves (base/stop_signal.h).
  rz::install_stop_handlers();
  // A file-size limit (ulimit -f) then makes write() fail with EFBIG, which the writers
  // report naming the file, instead of killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return it->run(argc - 1, argv + 1);
  } catch (const rz::Error& e) {
    // An error quotes file names and file contents: escaped, so it stays one line that no
    // byte of a hostile file can turn into a terminal command (base/printable.h).
    std::fprintf(stderr, "ringzero %s: error: %s\n", argv[1], rz::printable(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    // The big buffers name themselves (base/memory.h); this is a smaller allocation.
    std::fprintf(stderr, "ringzero %s: error: out of memory (an allocation failed; smaller --batch, --seq or model, "
                 "or fewer ranks per machine)\n", argv[1]);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringzero %s: error: %s\n", argv[1], rz::printable(e.what()).c_str());
    return 1;
  }
}
