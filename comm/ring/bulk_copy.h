// comm/ring/bulk_copy.h: the copy of a large AllGather chunk into its place in `out`.
#pragma once

#include <cstddef>

namespace rz {

// memcpy, except that from kStreamCopyBytes up (x86-64) the stores are non-temporal:
// they go to memory without first reading each destination line into the cache. glibc's
// memcpy keeps ordinary stores up to its non-temporal threshold, which it derives from
// the reported cache size (192 MiB on the 2-core VM), so an AllGather's multi-MiB chunks
// paid a line read per line written: a third of the memory traffic, with two ranks
// copying at once on one memory bus. Measured there (bench/results/comm-targets-2026-11-30e.md):
// AllGather N = 2 of 16 MiB 1.7x faster, of 8 MiB 1.8x; with 1 MiB chunks and less, which
// stay in cache, ordinary stores were 5-10% faster, hence the threshold.
// dst and src may not overlap.
void bulk_copy(void* dst, const void* src, size_t n);
inline constexpr size_t kStreamCopyBytes = size_t(4) << 20;

}  // namespace rz
