// comm/ring/channel.h: the one thing the ring needs from a transport.
//
// A rank's RingChannel sends messages to its right neighbour (rank+1) and receives them
// from its left neighbour (rank-1), in order. The ring algorithm (ring.cpp) is written
// once against this interface; thread, shm and tcp only differ in how bytes move.
//
// recv() does not copy into a caller buffer: it hands the caller a pointer to the
// received bytes where they already lie (a shared-memory slot for shm and thread, the
// reader thread's slot for tcp), so the ring reduces straight from the slot. The pointer
// is valid only inside the consume callback; the slot is released when it returns.
//
// send() returns when the bytes are out of the caller's buffer (copied into the
// neighbour's slot or handed to the kernel), so the ring may overwrite src at once.
//
// Direct reads: a channel whose receiver can read the sender's memory in place (shm) says
// so with direct_reads(). For an AllGather chunk the ring then first calls send_direct,
// and the transport decides: it sends a reference to where the chunk lies, which the
// receiver copies once, straight from the sender's buffer into its own (recv_direct: one
// copy per hop instead of two, into a slot and out of it), or, where such a read would
// not beat the slots, a note that the chunk follows through the slots in segments. The
// shm transport reads registered buffers (base/shared_memory.h) with memcpy from a
// mapping of the sender's region, other memory with cross-memory attach (process_vm_readv)
// up to kDirectChunkMaxBytes. The sender's bytes must stay unchanged until
// wait_sent_consumed() returns, so a collective that sent references calls it before it
// returns. Both ends of every edge agree on direct_reads() (the shm transport decides it
// for the whole ring at connect time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "base/check.h"
#include "comm/communicator.h"  // PeerError

namespace rz {

// Every message carries a tag so a rank that runs a different collective than its
// neighbour (or has RINGZERO_COMM_DEBUG set when the neighbour has not) is caught.
enum class MsgTag : uint32_t { data = 1, fingerprint = 2, barrier = 3, direct = 4 };

class RingChannel {
 public:
  virtual ~RingChannel() = default;

  // Blocks until the message is out of src (at most timeout_s); bytes <= max_message_bytes().
  virtual void send(const void* src, size_t bytes, MsgTag tag) = 0;
  // Waits for the next message from the left (at most timeout_s), checks that it has the
  // expected tag and size, and calls consume(pointer to its bytes) on it in place.
  virtual void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) = 0;
  // Largest message one send() may carry (the slot size, at least segment_bytes).
  virtual size_t max_message_bytes() const = 0;
  // Marks both directions closed so the neighbours fail at once instead of timing out.
  virtual void close() = 0;

  // Direct reads (see the top of this file); the calls below only when direct_reads() is true.
  virtual bool direct_reads() const { return false; }
  // Sends a reference to the bytes bytes at src (which then stay unchanged until
  // wait_sent_consumed()) and returns true, or returns false after sending the note that
  // the chunk follows through the slots (the caller then send()s it in segments).
  virtual bool send_direct(const void* src, size_t bytes) {
    (void)src, (void)bytes;
    RZ_FAIL("this transport cannot read its neighbour's memory directly");
  }
  // Receives what send_direct sent for a chunk of bytes bytes: copies a referenced chunk
  // from the left neighbour's memory into dst and returns true, or returns false when the
  // chunk follows through the slots (the caller then recv()s it in segments).
  virtual bool recv_direct(void* dst, size_t bytes) {
    (void)dst, (void)bytes;
    RZ_FAIL("this transport cannot read its neighbour's memory directly");
  }
  // Whether references to registered buffers (base/shared_memory.h) are read with memcpy
  // from a mapping rather than through the kernel: what makes allocating them worth it.
  virtual bool reads_shared_memory() const { return false; }
  // Waits until the right neighbour has consumed every message this rank sent.
  virtual void wait_sent_consumed() {}
};

}  // namespace rz
