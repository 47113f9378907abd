// Catch2's implementation without its main(), compiled once for the test programs that
// write their own main() (the GPU tests, test_cpu_paths: they decide to skip before
// Catch2 runs). Each of them compiling it again cost 20-25 s of one core in Release and
// 75-100 s under the sanitizers.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/catch_runner.h"

int rz::test::run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
