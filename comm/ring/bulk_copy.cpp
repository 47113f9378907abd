#include "comm/ring/bulk_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace rz {

void bulk_copy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kStreamCopyBytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    // Head: up to the first 64-byte boundary of dst, with ordinary stores.
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    std::memcpy(d, s, head);
    d += head, s += head, n -= head;
    const size_t body = n & ~size_t(63);
    for (size_t i = 0; i < body; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    _mm_sfence();  // the streamed lines are visible before anything this thread does next
    std::memcpy(d + body, s + body, n - body);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace rz
