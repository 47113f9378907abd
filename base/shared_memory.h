// base/shared_memory.h: host memory that other processes can map (registered buffers).
//
// The shm transport reads its neighbour's AllGather chunks in place. For ordinary memory
// it can only do that through the kernel (process_vm_readv, one copy at 1.5-5.7 GB/s on
// our VM); memory that both processes map is read with a plain memcpy (5-26 GB/s). So a
// buffer that collectives gather into (zero1/zero2's parameters, comm-bench's tensors)
// may be allocated here: a memfd of its own (memfd_create + ftruncate + mmap MAP_SHARED,
// page-granular, zero-filled by the kernel) whose fd stays open so that a peer with the
// right to read this process (the same right process_vm_readv needs) can open
// /proc/<pid>/fd/<fd> and map it. This is the role NCCL's registered buffers and MPI's
// windows play.
//
// A process-wide registry records every live region {id, base, bytes, fd, inode}. Ids
// count up from 1 and are never reused, so a peer may cache its mapping by id; the free
// epoch counts frees, so a peer that sees a new epoch knows some region it may have mapped
// is gone and drops its cached mappings (it must not keep freed pages alive, and a reused
// fd number or address must never find a stale mapping).
//
// Buffer<T>::allocate_shared (base/memory.h) uses this; the tracker accounts those bytes
// under their tag exactly like an ordinary allocation of the same size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rz {

// Page-rounded, zero-filled, mapped read-write; throws rz::Error naming the size and why.
void* shared_host_alloc(size_t bytes);
// p: a pointer shared_host_alloc returned (nullptr is ignored). Bumps the free epoch.
void shared_host_free(void* p);

// Where [p, p + bytes) lies inside one live region.
struct SharedRegionRef {
  uint64_t id = 0;            // the region's id (1, 2, ...; never reused in this process)
  uint64_t offset = 0;        // of p from the region's base
  uint64_t region_bytes = 0;  // the region's mapped size (page-rounded)
  uint64_t inode = 0;         // the memfd's inode: a peer checks the fd it opened against it
  uint64_t free_epoch = 0;    // regions freed so far in this process
  int fd = -1;                // the memfd, open for the region's lifetime
};
// True when one live region contains all of [p, p + bytes); fills *out.
bool find_shared_region(const void* p, size_t bytes, SharedRegionRef* out);
// Live regions (for tests and diagnostics).
size_t shared_region_count();

}  // namespace rz
