// comm/options.cpp: the names of the comm backends and transports, both ways.
#include "comm/options.h"

#include <cstdlib>
#include <iterator>

#include "base/check.h"

namespace rz {

static_assert(std::size(kCommBackends) == size_t(CommBackend::nccl) + 1, "one name per CommBackend");
static_assert(std::size(kCommTransports) == size_t(CommTransport::thread) + 1, "one name per CommTransport");

const char* comm_backend_name(CommBackend b) { return kCommBackends[static_cast<size_t>(b)]; }

CommBackend parse_comm_backend(const std::string& name) {
  for (size_t i = 0; i < std::size(kCommBackends); ++i)
    if (name == kCommBackends[i]) return static_cast<CommBackend>(i);
  RZ_FAIL("comm: expected ring, mpi or nccl, found '%s'", name.c_str());
}

const char* comm_transport_name(CommTransport t) { return kCommTransports[static_cast<size_t>(t)]; }

CommTransport parse_comm_transport(const std::string& name) {
  for (size_t i = 0; i < std::size(kCommTransports); ++i)
    if (name == kCommTransports[i]) return static_cast<CommTransport>(i);
  RZ_FAIL("comm transport: expected auto, shm, tcp or thread, found '%s'", name.c_str());
}

bool env_switch(const char* name, bool unset) {
  const char* env = std::getenv(name);
  const std::string setting = env == nullptr ? "" : env;
  RZ_CHECK(setting.empty() || setting == "0" || setting == "1", "%s: expected 0 or 1, found '%s'", name,
           setting.c_str());
  return setting.empty() ? unset : setting == "1";
}

}  // namespace rz
