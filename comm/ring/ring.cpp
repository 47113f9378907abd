// comm/ring/ring.cpp: ring ReduceScatter, AllGather, AllReduce, Broadcast and Barrier.
//
// Terms (those of the seed article, which docs/comm.md describes):
//   N        ranks on a ring; rank r sends only to its right neighbour r+1 and receives
//            only from its left neighbour r-1 (indices mod N).
//   chunk c  the c-th of the N pieces of the full tensor: shard_of(count, N, c). Chunks
//            have S = ceil(count/N) elements, the trailing ones fewer or none; nothing is
//            padded, a short chunk simply sends fewer bytes.
//   shard    the chunk a rank owns: rank r owns chunk r.
//   round    one step of a phase: every rank sends one chunk and receives one chunk.
//            A phase has N-1 rounds.
//   segment  the pipeline unit: a chunk goes over the channel in segments of at most
//            segment_bytes, so while rank r reduces segment s, its left neighbour is
//            already writing segment s+1 and its right neighbour forwarding segment s-1.
//
// ReduceScatter. In round k (1..N-1) rank r sends chunk (r-k) and receives chunk
// (r-k-1), adding the received partial sum to its own copy of that chunk. Chunk c starts
// on rank c+1 (round 1: its own data), gains one rank's term per hop, and after N-1 hops
// arrives complete on rank c. (The seed article's table starts chunk c on rank c and ends
// it on rank c-1; we shift the schedule by one so rank r ends with shard r, as
// communicator.h promises.) With N = 4 ranks holding a, b, c, d, chunk 0 leaves rank 1
// as b0, becomes b0+c0 on rank 2, b0+c0+d0 on rank 3 and b0+c0+d0+a0 on rank 0.
// For avg the owner divides the finished sum by N in fp32 right after the last hop, so
// all_reduce(avg) and reduce_scatter(avg) produce bitwise the same shard.
// bf16 partial sums are added in fp32 and rounded to bf16 (RNE) at every hop, because
// the hop's result travels as bf16.
//
// AllGather. Rank r starts holding chunk r. In round k it sends chunk (r-k+1) -- its own
// chunk in round 1, afterwards the chunk it received in the previous round -- and
// receives chunk (r-k). After N-1 rounds every rank holds every chunk.
//
// AllReduce = ReduceScatter then AllGather on the same ring and the same buffer: after
// the first phase rank r holds the finished chunk r, which is exactly AllGather's start.
// Per rank and phase the chunks sent add up to (N-1)/N of the tensor (up to the shorter
// trailing chunks), hence the 2(N-1)/N x M bytes of an AllReduce.
//
// Small AllReduce: up to kSmallAllReduceBytes at N = 2 and kSmallAllReduceManyBytes from
// N = 3 (one segment at most), every rank passes its whole input around the ring and adds
// all N up locally in the ring's order (small_all_reduce): N-1 dependent hops instead of
// 2(N-1), bitwise the ring's result. comm-trace (an observer) always sees the ring.
//
// Broadcast pipelines segments along the ring from the root: r receives a segment from
// the left, keeps it and forwards it right, unless the right neighbour is the root.
// Barrier passes a one-byte token N-1 times: the k-th token rank r receives proves that
// rank r-k has entered, so after N-1 tokens every rank has.
#include "comm/ring/ring.h"

#include <algorithm>
#include <cstring>

#include "base/bf16.h"
#include "base/shared_memory.h"
#include "comm/ring/bulk_copy.h"

namespace rz {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

size_t segment_elems(const RingContext& ctx, size_t esz) {
  size_t seg_bytes = std::min(ctx.segment_bytes, ctx.channel->max_message_bytes());
  return std::max<size_t>(1, seg_bytes / esz);
}

void observe(RingContext& ctx, CollectiveKind phase, int round, bool end, int sent, int recv,
             const void* data, size_t n, DType dt) {
  if (!end && ctx.progress != nullptr) ctx.progress->store(flight_progress(phase, round), std::memory_order_relaxed);
  if (ctx.observer == nullptr) return;
  RingRound ev;
  ev.rank = ctx.rank;
  ev.nranks = ctx.nranks;
  ev.phase = phase;
  ev.round = round;
  ev.end = end;
  ev.sent_chunk = sent;
  ev.recv_chunk = recv;
  ev.data = data;
  ev.data_count = n;
  ev.dtype = dt;
  ctx.observer->on_round(ev);
}

// One round of either phase: `out` goes to the right neighbour while `in` comes from the
// left, message by message interleaved (send one, receive one), so that no rank waits on
// a full inbox while its own is full, and while this rank consumes segment s its
// neighbours already move segment s+1. consume(first, n, incoming) takes the n received
// elements that start at element `first` of the chunk; `incoming` points into the
// channel's slot and is valid only during the call. after_first_send() runs between the
// round's first send and its first receive, after_first_recv() right after that receive.
template <typename Consume, typename AfterSend, typename AfterRecv>
void exchange_round(RingContext& ctx, OutgoingChunk& out, IncomingChunk& in, size_t esz, const Consume& consume,
                    const AfterSend& after_first_send, const AfterRecv& after_first_recv) {
  auto consume_bytes = [&](size_t first, size_t n, const void* incoming) { consume(first / esz, n / esz, incoming); };
  for (bool first = true; !out.done() || !in.done(); first = false) {
    if (!out.done()) ctx.bytes_sent += out.send_next();
    if (first) after_first_send();
    if (!in.done()) ctx.bytes_recv += in.recv_next(consume_bytes);
    if (first) after_first_recv();
  }
}

template <typename Consume>
void exchange_round(RingContext& ctx, OutgoingChunk& out, IncomingChunk& in, size_t esz, const Consume& consume) {
  exchange_round(ctx, out, in, esz, consume, [] {}, [] {});
}

// The ReduceScatter phase. in: the rank's full input (count elements). The running partial
// sum of chunk c lives at partial(c); the finished chunk r is written to out.
template <typename PartialFn>
void reduce_scatter_phase(RingContext& ctx, const char* in, char* out, size_t count, DType dt,
                          ReduceOp op, PartialFn partial) {
  const int N = ctx.nranks, r = ctx.rank;
  const size_t esz = dtype_size(dt), seg_bytes = segment_elems(ctx, esz) * esz;
  for (int k = 1; k <= N - 1; ++k) {
    const int send_chunk = mod(r - k, N), recv_chunk = mod(r - k - 1, N);
    const bool last_hop = k == N - 1;  // recv_chunk == r: the sum is complete after this add
    ShardRange sc = shard_of(count, N, send_chunk), rc = shard_of(count, N, recv_chunk);
    const char* send_src = k == 1 ? in + sc.offset * esz : partial(send_chunk);
    char* recv_dst = last_hop ? out : partial(recv_chunk);
    const char* own = in + rc.offset * esz;
    const int divide_by = last_hop && op == ReduceOp::avg ? N : 0;
    observe(ctx, CollectiveKind::reduce_scatter, k, false, send_chunk, recv_chunk, send_src, sc.count, dt);
    // Partial sums travel through the slots: the receiver reads each byte once anyway to add it.
    OutgoingChunk outgoing(*ctx.channel, send_src, sc.count * esz, seg_bytes, false);
    IncomingChunk incoming(*ctx.channel, nullptr, rc.count * esz, seg_bytes, false);
    exchange_round(ctx, outgoing, incoming, esz, [&](size_t first, size_t n, const void* slot) {
      ctx.elements->reduce(dt, recv_dst + first * esz, slot, own + first * esz, n, divide_by);
    });
    observe(ctx, CollectiveKind::reduce_scatter, k, true, send_chunk, recv_chunk, recv_dst, rc.count, dt);
  }
}

// The AllGather phase over out (count elements), which already holds chunk r, or, with
// own_src, receives it from there during round 1. With `in_place_reads` (host buffers), the
// channel may let the right neighbour read each chunk straight out of `out` (or own_src)
// instead of sending it through the slots (channel.h, direct reads); because it reads after
// this rank has moved on, the phase then ends by waiting until it has read everything.
// AllReduce's AllGather phase does not allow it: measured on the 2-core VM it was slower
// with CMA references (0.4-0.9x at N = 2, bench/results/comm-targets-2026-11-30b.md), the
// plain AllGather faster (up to 2.3x at 1 MiB); and DDP's gradient buckets are not
// registered memory, so registered references would not reach training there.
void all_gather_phase(RingContext& ctx, char* out, size_t count, DType dt, bool in_place_reads,
                      const char* own_src = nullptr) {
  const int N = ctx.nranks, r = ctx.rank;
  const size_t esz = dtype_size(dt), seg_bytes = segment_elems(ctx, esz) * esz;
  const bool readable = in_place_reads && ctx.elements->on_host();
  bool sent_reference = false;
  for (int k = 1; k <= N - 1; ++k) {
    const int send_chunk = mod(r - k + 1, N), recv_chunk = mod(r - k, N);
    ShardRange sc = shard_of(count, N, send_chunk), rc = shard_of(count, N, recv_chunk);
    const char* send_src = k == 1 && own_src != nullptr ? own_src : out + sc.offset * esz;
    char* recv_dst = out + rc.offset * esz;
    OutgoingChunk outgoing(*ctx.channel, send_src, sc.count * esz, seg_bytes, readable);
    IncomingChunk incoming(*ctx.channel, recv_dst, rc.count * esz, seg_bytes, readable);
    // Rank r's own chunk (own_src) reaches out[r] in round 1. A chunk that goes through the
    // slots is copied first. One the neighbour may read in place is copied after its
    // reference went out: at N = 2 before the receive on rank 0 and after it on rank 1, so
    // both ranks copy chunk 0, then both chunk 1, and the second reader of each source finds
    // it in the shared cache (AllGather of 1 MiB 1.2-1.3x faster on the 2-core VM); from
    // N = 3 before the receive, so the forwarding rounds that follow are not delayed.
    auto copy_own = [&] {
      if (own_src != nullptr && sc.count > 0) bulk_copy(out + sc.offset * esz, own_src, sc.count * esz);
    };
    const bool own_round = k == 1 && own_src != nullptr;
    const bool copy_before_recv = N > 2 || send_chunk < recv_chunk;
    if (own_round && !outgoing.starts_direct()) copy_own();
    observe(ctx, CollectiveKind::all_gather, k, false, send_chunk, recv_chunk, send_src, sc.count, dt);
    exchange_round(
        ctx, outgoing, incoming, esz,
        [&](size_t first, size_t n, const void* slot) { ctx.elements->copy(recv_dst + first * esz, slot, n * esz); },
        [&] { if (own_round && outgoing.starts_direct() && copy_before_recv) copy_own(); },
        [&] { if (own_round && outgoing.starts_direct() && !copy_before_recv) copy_own(); });
    sent_reference = sent_reference || outgoing.referenced();
    observe(ctx, CollectiveKind::all_gather, k, true, send_chunk, recv_chunk, recv_dst, rc.count, dt);
  }
  if (sent_reference) ctx.channel->wait_sent_consumed();
}

// AllReduce of a small tensor (small_all_reduce_applies) in N-1 dependent hops instead of
// the ring's 2(N-1): in round k rank r sends right the whole input of rank r-k+1 (its own
// in round 1, afterwards the one it received last round) and receives rank r-k's, so after
// N-1 rounds every rank holds all N inputs (a transport with a gather board, shm and thread
// from N = 3, collects them in one step instead: comm/transport/gather_board.h). Each rank
// then adds them up chunk by chunk in exactly the order the ring's ReduceScatter would
// have: chunk c starts as rank c+1's input and gains the inputs of ranks c+2, ..., c+N
// (= c), one reduce_elements call per hop with the partial sum as the first operand, bf16
// rounded after every add, avg divided by N at the last. Every element is therefore bitwise
// what the ring computes, and all_reduce == reduce_scatter + all_gather still holds. At
// N = 2 it sends exactly the ring's bytes (count elements per rank); from N = 3 it sends
// (N-1) x count, more than the ring's 2(N-1)/N x count, so there it takes only inputs of a
// few floats (the trainer's loss and votes), whose time is their dependent hops (each a
// wake-up of the next rank, about 3 us with 4 ranks on 2 cores), not their bytes; gradient
// buckets keep the ring.
void small_all_reduce(RingContext& ctx, char* buf, size_t count, DType dt, ReduceOp op) {
  const int N = ctx.nranks, r = ctx.rank;
  const size_t esz = dtype_size(dt), bytes = count * esz;
  RingChannel& ch = *ctx.channel;
  char* inputs = static_cast<char*>(ctx.elements->scratch(N * bytes));  // rank q's input at q * bytes (host)
  if (ch.gathers_small(bytes)) {
    // One step on the transport's board instead of the hops: the same inputs, and each is
    // still delivered to N-1 ranks, so the byte counts stay the ring's.
    if (ctx.progress != nullptr) ctx.progress->store(flight_progress(CollectiveKind::all_reduce, 1), std::memory_order_relaxed);
    const uint64_t what = (uint64_t{static_cast<uint32_t>(dt)} << 56) ^ (uint64_t{static_cast<uint32_t>(op)} << 48) ^ count;
    ch.gather_small(buf, bytes, what, inputs);
    ctx.bytes_sent += (N - 1) * bytes;
    ctx.bytes_recv += (N - 1) * bytes;
  } else {
    std::memcpy(inputs + r * bytes, buf, bytes);
    for (int k = 1; k <= N - 1; ++k) {
      if (ctx.progress != nullptr) ctx.progress->store(flight_progress(CollectiveKind::all_reduce, k), std::memory_order_relaxed);
      char* dst = inputs + mod(r - k, N) * bytes;
      ch.send(inputs + mod(r - k + 1, N) * bytes, bytes, MsgTag::data);
      ch.recv(bytes, MsgTag::data, [&](const void* incoming) { std::memcpy(dst, incoming, bytes); });
      ctx.bytes_sent += bytes;
      ctx.bytes_recv += bytes;
    }
  }
  for (int c = 0; c < N; ++c) {
    const ShardRange sr = shard_of(count, N, c);
    if (sr.count == 0) continue;
    const size_t off = sr.offset * esz;
    char* sum = buf + off;
    for (int j = 2; j <= N; ++j) {
      const char* partial = j == 2 ? inputs + mod(c + 1, N) * bytes + off : sum;
      const int divide_by = j == N && op == ReduceOp::avg ? N : 0;
      reduce_elements(dt, sum, partial, inputs + mod(c + j, N) * bytes + off, sr.count, divide_by);
    }
  }
}

}  // namespace

void reduce_elements(DType dtype, void* dst, const void* a, const void* b, size_t n, int divide_by) {
  if (dtype == DType::f32) {
    float* d = static_cast<float*>(dst);
    const float* x = static_cast<const float*>(a);
    const float* y = static_cast<const float*>(b);
    if (divide_by > 0) {
      const float div = static_cast<float>(divide_by);
      for (size_t i = 0; i < n; ++i) d[i] = (x[i] + y[i]) / div;
    } else {
      for (size_t i = 0; i < n; ++i) d[i] = x[i] + y[i];
    }
  } else {
    bf16* d = static_cast<bf16*>(dst);
    const bf16* x = static_cast<const bf16*>(a);
    const bf16* y = static_cast<const bf16*>(b);
    if (divide_by > 0) {
      const float div = static_cast<float>(divide_by);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16((bf16_to_float(x[i]) + bf16_to_float(y[i])) / div);
    } else {
      for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
    }
  }
}

size_t ring_scratch_bytes(size_t count, int nranks, size_t elem_bytes) {
  return nranks <= 1 ? 0 : shard_of(count, nranks, 0).count * elem_bytes;
}

void ring_reduce_scatter(RingContext& ctx, const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  const size_t esz = dtype_size(dtype);
  if (ctx.nranks == 1) {
    if (count > 0 && in != out) ctx.elements->copy(out, in, count * esz);
    return;
  }
  // Partial sums of chunks this rank only passes on live in one chunk-sized work buffer:
  // the round that receives chunk c into it is followed by the round that sends it, and
  // each segment is sent before the next receive overwrites it.
  const size_t work_bytes = ring_scratch_bytes(count, ctx.nranks, esz);
  char* work = static_cast<char*>(ctx.elements->scratch(work_bytes));
  reduce_scatter_phase(ctx, static_cast<const char*>(in), static_cast<char*>(out), count, dtype, op,
                       [work](int) { return work; });
}

bool small_all_reduce_applies(size_t bytes, int nranks, size_t segment_bytes, size_t max_message_bytes,
                              bool observed) {
  const size_t limit = nranks == 2 ? kSmallAllReduceBytes : kSmallAllReduceManyBytes;
  return nranks >= 2 && bytes > 0 && bytes <= limit && bytes <= segment_bytes && bytes <= max_message_bytes &&
         !observed;
}

void ring_all_reduce(RingContext& ctx, void* buf, size_t count, DType dtype, ReduceOp op) {
  if (ctx.nranks == 1) return;  // the sum over one rank is its input; avg divides by 1
  const size_t esz = dtype_size(dtype);
  char* b = static_cast<char*>(buf);
  const int N = ctx.nranks;
  if (ctx.elements->on_host() &&
      small_all_reduce_applies(count * esz, N, ctx.segment_bytes, ctx.channel->max_message_bytes(),
                               ctx.observer != nullptr)) {
    small_all_reduce(ctx, b, count, dtype, op);
    return;
  }
  // In place: the partial sum of chunk c accumulates in buf's chunk c.
  reduce_scatter_phase(ctx, b, b + shard_of(count, N, ctx.rank).offset * esz, count, dtype, op,
                       [b, count, N, esz](int c) { return b + shard_of(count, N, c).offset * esz; });
  all_gather_phase(ctx, b, count, dtype, false);
}

void ring_all_gather(RingContext& ctx, const void* shard, void* out, size_t count, DType dtype) {
  const size_t esz = dtype_size(dtype);
  ShardRange mine = shard_of(count, ctx.nranks, ctx.rank);
  char* o = static_cast<char*>(out);
  const char* own = static_cast<const char*>(shard);
  char* own_in_out = o + mine.offset * esz;
  const bool in_place = mine.count == 0 || own == own_in_out;
  // Out of place over a channel with direct reads (host buffers), round 1 sends this rank's
  // chunk straight from `shard`, so the neighbour can read it before it is copied into out;
  // all_gather_phase places the copy. Not when out is registered memory the neighbour
  // maps and shard is not: out's copy is then the faster source (memcpy, not the kernel).
  // Elsewhere the chunk is copied first, as always.
  auto registered = [&](const void* p) {
    SharedRegionRef ref;
    return find_shared_region(p, mine.count * esz, &ref);
  };
  if (!in_place && ctx.nranks > 1 && ctx.elements->on_host() && ctx.channel->direct_reads() &&
      (!ctx.channel->reads_shared_memory() || registered(own) || !registered(own_in_out))) {
    all_gather_phase(ctx, o, count, dtype, true, own);
    return;
  }
  if (!in_place) ctx.elements->copy(own_in_out, shard, mine.count * esz);
  if (ctx.nranks == 1) return;
  all_gather_phase(ctx, o, count, dtype, true);
}

void ring_broadcast(RingContext& ctx, void* buf, size_t count, DType dtype, int root) {
  const int N = ctx.nranks, r = ctx.rank;
  if (N == 1 || count == 0) return;
  const size_t esz = dtype_size(dtype);
  const size_t seg = segment_elems(ctx, esz);
  const size_t nseg = (count + seg - 1) / seg;
  const bool forwards = mod(r + 1, N) != root;
  char* b = static_cast<char*>(buf);
  RingChannel& ch = *ctx.channel;
  observe(ctx, CollectiveKind::broadcast, 1, false, r == root ? 0 : -1, -1, buf, count, dtype);
  for (size_t s = 0; s < nseg; ++s) {
    size_t n = std::min(seg, count - s * seg);
    char* p = b + s * seg * esz;
    if (r != root) {
      ch.recv(n * esz, MsgTag::data, [&](const void* incoming) { ctx.elements->copy(p, incoming, n * esz); });
      ctx.bytes_recv += n * esz;
    }
    if (r == root || forwards) {
      ch.send(p, n * esz, MsgTag::data);
      ctx.bytes_sent += n * esz;
    }
  }
  observe(ctx, CollectiveKind::broadcast, 1, true, -1, r == root ? -1 : 0, buf, count, dtype);
}

void ring_barrier(RingContext& ctx) {
  const unsigned char token = 1;
  for (int k = 1; k <= ctx.nranks - 1; ++k) {
    if (ctx.progress != nullptr) ctx.progress->store(flight_progress(CollectiveKind::barrier, k), std::memory_order_relaxed);
    ctx.channel->send(&token, 1, MsgTag::barrier);
    ctx.channel->recv(1, MsgTag::barrier, [](const void*) {});
    ctx.bytes_sent += 1;
    ctx.bytes_recv += 1;
  }
}

void ring_check_fingerprint(RingContext& ctx, const Fingerprint& fp) {
  if (ctx.nranks == 1) return;
  const int left = mod(ctx.rank - 1, ctx.nranks);
  ctx.channel->send(&fp, sizeof fp, MsgTag::fingerprint);
  Fingerprint theirs;
  ctx.channel->recv(sizeof theirs, MsgTag::fingerprint,
                    [&](const void* p) { std::memcpy(&theirs, p, sizeof theirs); });
  if (std::memcmp(&theirs, &fp, sizeof fp) != 0) throw FingerprintError(left, fp, theirs);
}

}  // namespace rz
