// base/host_memory.h: how much host memory a run can still take, asked before it allocates.
//
// Why: Linux overcommits. A buffer of a petabyte is "allocated" and the process then grows
// page by page until the OOM killer ends it (or something else on the machine) without a
// word. The subcommands that know their bytes up front (the memory planner, zero/memory/
// plan.h) compare them with this figure first and refuse what cannot fit, naming both.
#pragma once

#include <cstdint>
#include <string>

namespace rz {

struct HostMemory {
  uint64_t bytes = 0;  // what is left
  std::string source;  // where the figure comes from: "MemAvailable in /proc/meminfo", "the cgroup limit (...)"
  bool known = false;  // false: neither could be read (nothing is refused then)
};

// MemAvailable (/proc/meminfo) or, when smaller, the room under this process's cgroup memory
// limit: limit minus usage, the tightest of its cgroup and the cgroups above it (v2:
// memory.max - memory.current; v1: memory.limit_in_bytes - memory.usage_in_bytes).
HostMemory available_host_memory();

// Throws "WHAT: planned PLANNED, but only Y is available (SOURCE): nothing was allocated;
// HINT" when `bytes` exceed available_host_memory(); nothing when they fit or the figure
// cannot be read. PLANNED says how the bytes were counted ("1.2 GiB per rank (...)").
void check_host_memory(double bytes, const std::string& planned, const char* what, const char* hint);

}  // namespace rz
