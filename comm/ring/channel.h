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
// so with direct_reads(). The ring moves a chunk over an edge through the two cursors at
// the end of this file (OutgoingChunk, IncomingChunk), and the channel decides what the
// chunk's messages are: its segments through the slots, or, for a chunk the ring lets be
// read in place (AllGather's) and that starts_direct() says is worth it, first a direct
// message: a reference to where the chunk lies, which the receiver copies once, straight
// from the sender's buffer into its own (one copy per hop instead of two, into a slot and
// out of it), or a note that the chunk follows through the slots in segments after all.
// The shm transport reads registered buffers (base/shared_memory.h) with memcpy from a
// mapping of the sender's region, other memory with cross-memory attach (process_vm_readv)
// up to kDirectChunkMaxBytes. The sender's bytes must stay unchanged until
// wait_sent_consumed() returns, so a collective that sent references calls it before it
// returns. Both ends of every edge agree on direct_reads() and starts_direct() (the shm
// transport decides direct reads for the whole ring at connect time).
#pragma once

#include <algorithm>
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
  // Whether a chunk of `bytes` bytes that may be read in place starts with a direct
  // message; both ends of an edge answer alike for the same size.
  virtual bool starts_direct(size_t bytes) const {
    (void)bytes;
    return false;
  }
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

  // Small gathers (comm/transport/gather_board.h): a transport whose ranks share a board
  // collects every rank's small input in one step instead of N-1 hops around the ring.
  // Whether it takes `bytes` bytes per rank (every rank answers alike for the same size):
  virtual bool gathers_small(size_t bytes) const {
    (void)bytes;
    return false;
  }
  // Every rank's `bytes` bytes at mine into all (N x bytes, rank order); `what` names the
  // collective, so ranks that run different ones fail with an error instead of mixing them.
  virtual void gather_small(const void* mine, size_t bytes, uint64_t what, void* all) {
    (void)mine, (void)bytes, (void)what, (void)all;
    RZ_FAIL("this transport has no gather board");
  }
};

// The shm transport's rule for direct reads: a chunk of at least kDirectChunkBytes starts
// with a direct message (smaller ones are cheaper through the slots); the sender references
// a chunk in a registered buffer at any size (read with memcpy) and one in other memory up
// to kDirectChunkMaxBytes (read with process_vm_readv): larger CMA reads measured slower
// than the slots on the 2-core VM (8 MiB chunks: 0.57-0.99x in six alternating runs, 4 MiB
// chunks 1.09-1.34x; bench/results/comm-targets-2026-11-30b.md), so those follow in segments.
constexpr size_t kDirectChunkBytes = 64 * 1024;
constexpr size_t kDirectChunkMaxBytes = 4u << 20;

// A chunk going to the right neighbour as a sequence of messages, one per send_next(), so
// the ring can interleave them with the messages of the chunk coming in from the left.
// Its messages are its segments of at most segment_bytes, unless `readable_in_place` (the
// caller keeps src unchanged until wait_sent_consumed()) and the channel starts such a
// chunk with a direct message: then the first message is send_direct's, and the segments
// follow only if the transport chose the slots after all.
class OutgoingChunk {
 public:
  OutgoingChunk(RingChannel& ch, const char* src, size_t bytes, size_t segment_bytes, bool readable_in_place)
      : ch_(ch), src_(src), bytes_(bytes), seg_(segment_bytes),
        direct_(readable_in_place && ch.starts_direct(bytes)),
        messages_(direct_ ? 1 : segments()) {}
  bool done() const { return next_ == messages_; }
  // Whether the chunk's first message is a direct one (it may then be read from src).
  bool starts_direct() const { return direct_; }
  // Whether the chunk went as a reference (known after the first send_next()).
  bool referenced() const { return referenced_; }
  // Sends the next message; returns the chunk bytes it delivered (a reference: all of them).
  size_t send_next() {
    const size_t m = next_++;
    if (direct_ && m == 0) {
      if (ch_.send_direct(src_, bytes_)) {
        referenced_ = true;
        return bytes_;
      }
      messages_ = 1 + segments();  // the note: the chunk follows through the slots
      return 0;
    }
    const size_t s = direct_ ? m - 1 : m, first = s * seg_, n = std::min(seg_, bytes_ - first);
    ch_.send(src_ + first, n, MsgTag::data);
    return n;
  }

 private:
  size_t segments() const { return (bytes_ + seg_ - 1) / seg_; }
  RingChannel& ch_;
  const char* src_;
  size_t bytes_, seg_;
  bool direct_, referenced_ = false;
  size_t messages_, next_ = 0;
};

// The receiving end of an OutgoingChunk: the same messages in the same order. A
// referenced chunk lands in dst whole (dst may be null unless readable_in_place); a
// segment is handed to consume(offset, bytes, incoming), `incoming` pointing into the
// channel's slot and valid only during the call.
class IncomingChunk {
 public:
  IncomingChunk(RingChannel& ch, char* dst, size_t bytes, size_t segment_bytes, bool readable_in_place)
      : ch_(ch), dst_(dst), bytes_(bytes), seg_(segment_bytes),
        direct_(readable_in_place && ch.starts_direct(bytes)),
        messages_(direct_ ? 1 : segments()) {}
  bool done() const { return next_ == messages_; }
  // Receives the next message; returns the chunk bytes it delivered.
  template <typename Consume>
  size_t recv_next(const Consume& consume) {
    const size_t m = next_++;
    if (direct_ && m == 0) {
      if (ch_.recv_direct(dst_, bytes_)) return bytes_;
      messages_ = 1 + segments();
      return 0;
    }
    const size_t s = direct_ ? m - 1 : m, first = s * seg_, n = std::min(seg_, bytes_ - first);
    ch_.recv(n, MsgTag::data, [&](const void* incoming) { consume(first, n, incoming); });
    return n;
  }

 private:
  size_t segments() const { return (bytes_ + seg_ - 1) / seg_; }
  RingChannel& ch_;
  char* dst_;
  size_t bytes_, seg_;
  bool direct_;
  size_t messages_, next_ = 0;
};

}  // namespace rz
