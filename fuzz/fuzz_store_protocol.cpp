// Fuzz target: the rendezvous store's wire protocol (comm/store.cpp). The input is a stream
// of [u32 length][bytes] frames as a peer would send: the first is the hello, the rest
// requests; each is split and parsed exactly as the server does, oversized frames refused.
#include <cstring>

#include "comm/store.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  bool first = true;
  while (pos + 4 <= size) {
    uint32_t len = 0;
    std::memcpy(&len, data + pos, 4);
    pos += 4;
    if (len > rz::kStoreMaxFrame || len > size - pos) break;  // the server hangs up
    const std::string_view frame(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
    if (first) {
      std::string token, nonce;
      if (!rz::parse_store_hello(frame, token, nonce)) break;
      if (token.size() + nonce.size() > frame.size()) std::abort();
      first = false;
      continue;
    }
    const rz::StoreRequest r = rz::parse_store_request(frame);
    if (r.op == 0) break;
    if (r.key.size() + r.value.size() > frame.size()) std::abort();
  }
  return 0;
}
