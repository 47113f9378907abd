// tests/catch_runner.h: Catch2's session for the test programs with their own main().
// Catch2 declares its Session only where its implementation is compiled, so that one file
// (tests/catch_runner.cpp, compiled once) runs it for them.
#pragma once

namespace rz::test {
// Runs the test cases as Catch2's own main() would with these arguments; returns its exit code.
int run_catch_session(int argc, char** argv);
}  // namespace rz::test
