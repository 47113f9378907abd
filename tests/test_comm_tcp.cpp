// Tests of the tcp transport with real processes: every op x dtype x sum/avg for N in 1..8
// and counts {0, 1, N-1, N+1, 1001}, tiny segments, byte counters against the formula.
// The checks themselves live in test_comm_procs.h, shared with the other process transport.
#include <catch2/catch.hpp>

#include "test_comm_procs.h"
#include "test_comm_util.h"

using namespace rz::testing;

TEST_CASE("tcp transport: every collective, N = 1..8, fp32 and bf16") { check_transport_collectives("tcp"); }

TEST_CASE("tcp transport: a 1 MiB AllReduce with default segments sends 2(N-1)/N x M") {
  check_transport_allreduce_bytes("tcp");
}
