// base/host_memory.cpp: available_host_memory (host_memory.h).
#include "base/host_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/check.h"
#include "base/memory.h"

namespace rz {
namespace {

// The first number in the file (bytes), or false ("max", missing, unreadable).
bool read_bytes(const std::string& path, uint64_t& out) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word.empty() || word.size() > 19 || word.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoull(word);
  return true;
}

// The room under the limits of the cgroup at `rel` (its path in /proc/self/cgroup) and of
// each cgroup above it, under the hierarchy mounted at `root`.
void tightest_cgroup(HostMemory& m, const std::string& root, std::string rel, const char* limit_file,
                     const char* usage_file) {
  for (;;) {
    const std::string dir = root + (rel == "/" ? "" : rel);
    uint64_t limit = 0, usage = 0;
    // A v1 "no limit" reads as about 2^63; anything that large is no limit.
    if (read_bytes(dir + "/" + limit_file, limit) && limit < (uint64_t{1} << 60) &&
        read_bytes(dir + "/" + usage_file, usage)) {
      const uint64_t room = limit > usage ? limit - usage : 0;
      if (!m.known || room < m.bytes) {
        m.bytes = room;
        m.known = true;
        m.source = "the cgroup limit (" + dir + "/" + limit_file + " " + std::to_string(limit) + " minus " +
                   std::to_string(usage) + " in use)";
      }
    }
    if (rel.empty() || rel == "/") return;
    const size_t slash = rel.rfind('/');
    rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
  }
}

}  // namespace

HostMemory available_host_memory() {
  HostMemory m;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (f >> key >> kb) {
      std::getline(f, unit);
      if (key == "MemAvailable:") {
        m.bytes = kb * 1024;
        m.known = true;
        m.source = "MemAvailable in /proc/meminfo";
        break;
      }
    }
  }
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {  // "0::/path" (v2) or "4:memory:/path" (v1)
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), rel = line.substr(b + 1);
    if (controllers.empty() && line.compare(0, a, "0") == 0)
      tightest_cgroup(m, "/sys/fs/cgroup", rel, "memory.max", "memory.current");
    else if ((',' + controllers + ',').find(",memory,") != std::string::npos)
      tightest_cgroup(m, "/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes", "memory.usage_in_bytes");
  }
  return m;
}

void check_host_memory(double bytes, const std::string& planned, const char* what, const char* hint) {
  const HostMemory host = available_host_memory();
  RZ_CHECK(!host.known || bytes <= static_cast<double>(host.bytes),
           "%s: planned %s, but only %s is available (%s): nothing was allocated; %s", what, planned.c_str(),
           format_bytes(static_cast<double>(host.bytes)).c_str(), host.source.c_str(), hint);
}

}  // namespace rz
