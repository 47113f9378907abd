// comm/transport/device_ring.h: the ring's `cuda` transport, its host side (no CUDA in this file).
//
// Ranks are processes on one host, each with its buffers in GPU memory (several ranks may
// share one GPU); across hosts a simpler channel stages through pinned host memory over
// tcp (make_staging_ring_channel, below). The ring algorithm is ring.cpp's, unchanged: the same chunks, segments,
// rounds and byte counts. Only where the bytes go differs:
//   inbox     nslots x slot_bytes of device memory per rank, written by its left neighbour.
//             Its CUDA IPC handle is published in the rendezvous store (every store
//             connection presents the job token) under "cuda_inbox/<rank>"; the right
//             neighbour opens it once at connect time.
//   data      a segment send() is a device-to-device copy, on this rank's comm stream, into
//             the right neighbour's inbox slot (m mod nslots for the m-th data message),
//             then a small control message {bytes, m} on the host channel (the shm slot
//             ring) tells the neighbour the slot is filled. recv() waits for the control
//             message and hands ring.cpp the device slot; ring.cpp reduces or copies from
//             it through RingElements (a kernel / cudaMemcpyAsync on the comm stream).
//   control   fingerprints and barrier tokens are host bytes and go on the host channel
//             unchanged.
// Ordering, the whole argument (tested in CI with a fake device whose stream only runs at
// synchronize()):
//   - a sender synchronizes its comm stream after the copy and before the control message,
//     so the neighbour never reads a slot before its bytes are there;
//   - a receiver synchronizes after consuming a slot and before releasing the control
//     message, so a released control message means its device slot has been read;
//   - the host channel lets a sender run at most `control_lookahead` messages ahead of its
//     receiver (a send returns only when message m - lookahead was released). When send
//     m-1 returned, every control message up to m-1-lookahead was released, so with
//     nslots >= lookahead + 1 the slot of data message m (last used by message m-nslots)
//     is free. Control messages that are not data only make this more conservative.
//   - a collective starts on the comm stream after a mark of the input stream taken when
//     it was issued (mark_input / wait_input), and ends with the comm stream synchronized:
//     a finished collective (blocking return, or its async handle done) has finished on
//     the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/ring/channel.h"
#include "comm/options.h"
#include "comm/rank_env.h"
#include "comm/ring/ring.h"

namespace rz {

class StoreClient;

// Segment and slot size of the cuda transport when CommOptions::segment_bytes is left at
// its default: each segment costs two stream synchronizations, so it must be large.
constexpr size_t kCudaDefaultSegmentBytes = 16u << 20;

// What a rank publishes about its inbox.
struct InboxRecord {
  int pid = 0;              // the process that owns the inbox (IPC needs two processes)
  int device = 0;           // its GPU
  uint32_t nslots = 0;
  uint64_t slot_bytes = 0;
  std::string handle;       // opaque bytes (cudaIpcMemHandle_t); hex in the store
};
inline std::string inbox_key(int rank) { return "cuda_inbox/" + std::to_string(rank); }
// "<pid> <device> <nslots> <slot_bytes> <hex handle>"
std::string encode_inbox_record(const InboxRecord& rec);
// false (rec untouched) unless s is exactly that format.
bool decode_inbox_record(const std::string& s, InboxRecord& rec);
// Publishes mine under inbox_key(rank) and returns the right neighbour's record, checked:
// a malformed value, a handle of another size or another slot geometry is one line naming
// the key.
InboxRecord exchange_inbox_records(StoreClient& store, int rank, int nranks, const InboxRecord& mine,
                                   size_t handle_bytes);

// What the cuda transport needs from a GPU (comm/transport/cuda_ring.cpp) or, in tests, a fake one.
// copy, reduce and scratch (RingElements) enqueue on one in-order stream, the comm stream.
class DeviceLink : public RingElements {
 public:
  virtual int device() const = 0;
  virtual void* inbox() = 0;                        // this rank's inbox (inbox_bytes at creation)
  virtual size_t handle_bytes() const = 0;          // sizeof the IPC handle
  virtual std::string inbox_handle() = 0;           // the handle other processes open
  virtual void* open_inbox(const InboxRecord& right) = 0;  // maps the right neighbour's inbox
  // Waits, at most the comm timeout, until all work enqueued so far has finished.
  virtual void synchronize() = 0;
  // On the thread that issues a collective: a mark of the input stream's work so far.
  virtual std::shared_ptr<void> mark_input() = 0;
  // On the thread that runs it, before anything is enqueued: the comm stream waits for it.
  virtual void wait_input(const std::shared_ptr<void>& mark) = 0;
  // True for host memory (a collective on host buffers goes over the host channel).
  virtual bool is_host_memory(const void* p) = 0;
  // Across hosts (make_staging_ring_channel): grow-only pinned host memory and device
  // memory for one segment each, owned by the link.
  virtual void* host_staging(size_t bytes) = 0;
  virtual void* device_staging(size_t bytes) = 0;
};

// The cuda transport's RingChannel over a host control channel (see the top of the file).
// Collectives whose buffers are all host memory (the trainer's scalars, the clip norm's
// partials) run on the control channel itself, as the shm transport would run them:
// control_channel_of gives it (null for a channel that is not the cuda transport's).
// Needs nslots >= control_lookahead + 1.
std::unique_ptr<RingChannel> make_device_ring_channel(std::unique_ptr<RingChannel> control, uint32_t control_lookahead,
                                                      std::shared_ptr<DeviceLink> link, void* right_inbox,
                                                      uint32_t nslots, size_t slot_bytes, int rank, int nranks);

RingChannel* control_channel_of(RingChannel* channel);

// Ranks on several hosts (or --transport tcp): GPU buffers staged through pinned host
// memory over a host channel (tcp). A data segment send copies the segment device to
// pinned host on the comm stream, waits, and sends the host bytes; a receive copies the
// received bytes to a device staging segment, hands that to ring.cpp, and waits for the
// consuming kernel before the host slot is released. Other messages pass unchanged.
std::unique_ptr<RingChannel> make_staging_ring_channel(std::unique_ptr<RingChannel> host,
                                                       std::shared_ptr<DeviceLink> link);

// Device slots per ring edge for a host channel with kSlotsPerEdge slots.
uint32_t cuda_inbox_slots();

// Ranks on one host (the store already claimed): the shm control channel, the inbox
// records through the store, the right neighbour's inbox opened. link's inbox holds
// cuda_inbox_slots() x slot_bytes.
std::unique_ptr<RingChannel> connect_cuda_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store,
                                                  std::shared_ptr<DeviceLink> link, size_t slot_bytes);

// --- the simulated device (comm/transport/sim_ring.cpp, always built; CommOptions::device sim:K) ------
// The same link over base/sim_device.h: its memory is the simulated device's, its comm
// stream a sim::Stream; the inbox is shared through the arena's memfd.
int sim_ring_device_for(const RankEnv& env, const CommOptions& opts);
std::shared_ptr<DeviceLink> make_sim_link(const RankEnv& env, const CommOptions& opts, size_t inbox_bytes);

// --- built with CUDA (comm/transport/cuda_ring.cpp); without it, one-line errors -------------------

// "" when the cuda transport can run here; else why not (a build without CUDA, no driver
// or device). Never throws.
std::string cuda_ring_unavailable();
// The GPU of a rank: opts.device's ordinal (placed by the caller), checked against the
// visible GPUs (a sim device: sim_ring_device_for, in every build).
int cuda_ring_device_for(const RankEnv& env, const CommOptions& opts);
// A link on that GPU with a comm stream and an inbox of inbox_bytes (0: none, one rank).
std::shared_ptr<DeviceLink> make_cuda_link(const RankEnv& env, const CommOptions& opts, size_t inbox_bytes);

}  // namespace rz
