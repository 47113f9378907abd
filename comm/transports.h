// comm/transports.h: how each transport builds a rank's RingChannel (internal to comm/).
#pragma once

#include <memory>
#include <string>

#include "comm/channel.h"
#include "comm/factory.h"
#include "comm/slot_ring.h"
#include "comm/store.h"

namespace rz {

// Slots per ring edge: enough that a sender runs a few segments ahead of its receiver.
constexpr uint32_t kSlotsPerEdge = 4;
// A slot holds one segment, and at least a fingerprint message.
inline size_t slot_bytes_for(const CommOptions& opts) { return opts.segment_bytes < 64 ? 64 : opts.segment_bytes; }

// thread and shm: send into the right neighbour's inbox, receive from this rank's inbox.
// keep holds whatever owns the two rings' memory (heap rings, shm mappings).
std::unique_ptr<RingChannel> make_slot_channel(SlotRing to_right, SlotRing from_left, int rank, int nranks,
                                               double timeout_s, bool check_pids, std::shared_ptr<void> keep);

// shm: every rank creates its own inbox in /dev/shm, publishes its name in the store, maps
// the right neighbour's inbox, and unlinks its own once everyone has mapped.
std::unique_ptr<RingChannel> connect_shm_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store);

// tcp: every rank listens, publishes host:port in the store, connects to its right
// neighbour and accepts its left one (who must show the job token).
std::unique_ptr<RingChannel> connect_tcp_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store);

}  // namespace rz
