// Fuzz target: flight records (comm/debug/flight_doctor.cpp): parse one, then diagnose it beside a
// copy of itself as another rank, as `ringzero doctor` would.
#include <string>
#include <vector>

#include "base/check.h"
#include "comm/debug/flight_doctor.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    rz::FlightRecordFile f = rz::parse_flight_record(text, "rank0.json");
    std::vector<rz::FlightRecordFile> recs = {f, f};
    recs[1].rank = (f.rank + 1) % (f.world + 1);
    recs[1].world = f.world + 1;
    (void)rz::diagnose_flight_records(recs);
    (void)rz::diagnose_flight_records({f});
  } catch (const rz::Error&) {
  }
  return 0;
}
