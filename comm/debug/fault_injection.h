// comm/debug/fault_injection.h: TEST ONLY. Makes one rank run a wrong program on purpose, so the
// tests can prove that the flight recorder and `ringzero doctor` name it.
//
// RINGZERO_TEST_FAULT (unset in every real run; nothing else reads it):
//   skip-bucket:R:S:B   rank R does not issue gradient bucket B's collective at step S;
//   count:R:S:B         rank R issues it with half the elements.
// (S is the training step set_flight_step() labels, B the bucket trace::BucketLabel gives.)
// connect_communicator wraps the communicator in the fault only when the variable names
// this rank; a bad value is an error naming the variable.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace rz {

std::unique_ptr<Communicator> with_test_faults(std::unique_ptr<Communicator> comm);

}  // namespace rz
