// comm/rendezvous/nccl_id.cpp: NCCL's unique id through the rendezvous store (see nccl_id.h).
#include "comm/rendezvous/nccl_id.h"

#include "base/check.h"
#include "comm/rendezvous/store.h"

namespace rz {

std::string encode_nccl_id(const NcclIdBytes& id) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * id.size());
  for (unsigned char b : id) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

namespace {
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}
}  // namespace

bool decode_nccl_id(const std::string& s, NcclIdBytes& id) {
  if (s.size() != 2 * kNcclIdBytes) return false;
  NcclIdBytes out{};
  for (size_t i = 0; i < kNcclIdBytes; ++i) {
    const int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  id = out;
  return true;
}

NcclIdBytes share_nccl_id(StoreClient& store, int rank, const std::function<NcclIdBytes()>& make_id) {
  NcclIdBytes id{};
  if (rank == 0) {
    id = make_id();
    store.set(kNcclIdKey, encode_nccl_id(id));
    return id;
  }
  const std::string v = store.get(kNcclIdKey);
  RZ_CHECK(decode_nccl_id(v, id), "rendezvous: store key %s holds %zu characters that are not an NCCL unique id "
           "(expected %zu hex characters)", kNcclIdKey, v.size(), 2 * kNcclIdBytes);
  return id;
}

}  // namespace rz
