// Fuzz target: TensorBoard event files as tests/tfevents_reader.h reads them (the tests read
// back what `train --tensorboard` writes and what PyPI's tensorboard wrote). A decoded file
// is written again with train/tensorboard.h's encoder and read back: every scalar (tag,
// step, value bits) and session start must survive the round trip.
#include <cstring>
#include <tuple>

#include "fuzz/fuzz_util.h"
#include "tests/tfevents_reader.h"
#include "train/tensorboard.h"

namespace {

using Scalar = std::tuple<std::string, int64_t, uint32_t>;  // tag, step, value bits

std::vector<Scalar> scalars_of(const std::vector<rz::test::TfEvent>& events) {
  std::vector<Scalar> out;
  for (const auto& e : events)
    for (const auto& v : e.values) {
      if (!v.has_simple_value) continue;
      uint32_t bits;
      std::memcpy(&bits, &v.simple_value, 4);
      out.emplace_back(v.tag, e.step, bits);
    }
  return out;
}

void check(const std::string& file) {
  std::vector<rz::test::TfEvent> events;
  try {
    events = rz::test::read_tfevents(file);
  } catch (const rz::Error&) {
    return;
  }
  std::string again;
  size_t starts = 0;
  for (const auto& e : events) {
    for (const auto& v : e.values)
      if (v.has_simple_value) again += rz::tfrecord(rz::event_scalar(e.wall_time, e.step, v.tag, v.simple_value));
    if (e.session_status == 1) again += rz::tfrecord(rz::event_session_start(e.wall_time, e.step)), ++starts;
  }
  const auto back = rz::test::read_tfevents(again);  // an rz::Error here is a finding (uncaught)
  size_t starts_back = 0;
  for (const auto& e : back) starts_back += e.session_status == 1;
  if (scalars_of(back) != scalars_of(events) || starts_back != starts) std::abort();
}

}  // namespace

// The input as a whole file, and framed as one record with correct CRCs: mutated bytes
// rarely keep their CRCs, and this way the Event parser itself sees arbitrary bytes.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  check(bytes);
  check(rz::tfrecord(bytes));
  return 0;
}
