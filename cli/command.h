// cli/command.h: the subcommands of the `ringzero` executable.
//
// Each subcommand lives in its own cli/cmd_*.cpp and registers itself with a static
// RegisterCommand object; main.cpp only dispatches. A command returns its exit status and
// reports bad input by throwing rz::Error (main prints it as one line and exits 1).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace rz {

struct Command {
  std::string name;     // "comm-bench"
  std::string summary;  // one line for `ringzero --help`
  std::function<int(int argc, char** argv)> run;  // argv[0] is the subcommand name
  int order = 100;      // position in `ringzero --help`
};

std::vector<Command>& command_registry();

struct RegisterCommand {
  explicit RegisterCommand(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace rz
