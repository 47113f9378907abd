// comm/rendezvous/nccl_id.h: how the ranks of a `--comm nccl` job agree on NCCL's unique id.
//
// Rank 0 makes the id (ncclGetUniqueId, 128 opaque bytes) and publishes it in the
// rendezvous store, whose every connection presents the job token (store.h); the other
// ranks read it from there. On the wire the id is 256 lowercase hex characters, so a
// truncated or foreign value is recognised and refused rather than handed to NCCL. This
// part is plain C++ (no CUDA, no NCCL) so that it is tested on machines without a GPU.
#pragma once

#include <array>
#include <functional>
#include <string>

namespace rz {

class StoreClient;

constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId); nccl_communicator.cpp asserts it
using NcclIdBytes = std::array<unsigned char, kNcclIdBytes>;

// The store key the id lives under.
inline constexpr const char* kNcclIdKey = "nccl/unique_id";

std::string encode_nccl_id(const NcclIdBytes& id);  // 256 hex characters
// false (id untouched) unless s is exactly 256 hex characters.
bool decode_nccl_id(const std::string& s, NcclIdBytes& id);

// Rank 0 calls make_id and publishes the result; every other rank waits (up to the store
// client's timeout) for it. A malformed value in the store is an error naming the key.
NcclIdBytes share_nccl_id(StoreClient& store, int rank, const std::function<NcclIdBytes()>& make_id);

}  // namespace rz
