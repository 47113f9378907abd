// comm/transport/device_ring.cpp: the cuda transport's host side (see device_ring.h): the inbox
// record through the store, and the RingChannel that moves data segments device to device
// and says so on a host control channel.
#include "comm/transport/device_ring.h"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/check.h"
#include "comm/rendezvous/store.h"
#include "comm/transport/transports.h"

namespace rz {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A decimal field of at most 19 digits, nothing else.
bool parse_decimal(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  out = v;
  return true;
}

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t sp = s.find(' ', start);
    parts.push_back(s.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
    if (sp == std::string::npos) return parts;
    start = sp + 1;
  }
}

// The control message that follows every data segment: which data message it is and its size.
struct SegmentNotice {
  uint64_t bytes;
  uint64_t seq;  // data messages sent on this edge before this one
};

class DeviceRingChannel final : public RingChannel {
 public:
  DeviceRingChannel(std::unique_ptr<RingChannel> control, std::shared_ptr<DeviceLink> link, void* right_inbox,
                    uint32_t nslots, size_t slot_bytes, int rank, int nranks)
      : control_(std::move(control)), link_(std::move(link)), inbox_(static_cast<char*>(link_->inbox())),
        right_inbox_(static_cast<char*>(right_inbox)), nslots_(nslots), slot_bytes_(slot_bytes),
        left_((rank - 1 + nranks) % nranks) {}
  ~DeviceRingChannel() override { control_->close(); }

  void send(const void* src, size_t bytes, MsgTag tag) override {
    if (tag != MsgTag::data) return control_->send(src, bytes, tag);  // host bytes
    RZ_CHECK(bytes <= slot_bytes_, "cuda transport: a %zu-byte segment does not fit a %zu-byte slot", bytes, slot_bytes_);
    // Free: the previous control send returned (device_ring.h, the lookahead argument).
    char* slot = right_inbox_ + (sent_ % nslots_) * slot_bytes_;
    if (bytes > 0) {
      link_->copy(slot, src, bytes);
      link_->synchronize();  // in the slot before the neighbour hears of it
    }
    const SegmentNotice notice{bytes, sent_};
    control_->send(&notice, sizeof notice, MsgTag::data);
    ++sent_;
  }

  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) override {
    if (tag != MsgTag::data) return control_->recv(bytes, tag, consume);
    control_->recv(sizeof(SegmentNotice), MsgTag::data, [&](const void* p) {
      SegmentNotice notice;
      std::memcpy(&notice, p, sizeof notice);
      if (notice.bytes != bytes || notice.seq != received_)
        throw PeerError(left_, strfmt("cuda transport: expected segment #%llu of %zu bytes from rank %d, it sent "
                                      "segment #%llu of %llu bytes",
                                      static_cast<unsigned long long>(received_), bytes, left_,
                                      static_cast<unsigned long long>(notice.seq),
                                      static_cast<unsigned long long>(notice.bytes)));
      consume(inbox_ + (received_ % nslots_) * slot_bytes_);
      link_->synchronize();  // the slot is read before its control message is released
    });
    ++received_;
  }

  size_t max_message_bytes() const override { return slot_bytes_; }
  void close() override { control_->close(); }
  RingChannel* control() { return control_.get(); }

 private:
  std::unique_ptr<RingChannel> control_;
  std::shared_ptr<DeviceLink> link_;
  char* inbox_;
  char* right_inbox_;
  const uint64_t nslots_;
  const size_t slot_bytes_;
  const int left_;
  uint64_t sent_ = 0, received_ = 0;  // data messages on each edge
};

// GPU buffers over a host channel, one staged segment at a time (device_ring.h).
class StagingRingChannel final : public RingChannel {
 public:
  StagingRingChannel(std::unique_ptr<RingChannel> host, std::shared_ptr<DeviceLink> link)
      : host_(std::move(host)), link_(std::move(link)) {}
  ~StagingRingChannel() override { host_->close(); }

  void send(const void* src, size_t bytes, MsgTag tag) override {
    if (tag != MsgTag::data || bytes == 0) return host_->send(src, bytes, tag);
    void* stage = link_->host_staging(bytes);
    link_->copy(stage, src, bytes);
    link_->synchronize();  // the bytes are on the host before they are sent
    host_->send(stage, bytes, tag);  // returns when they are out of stage
  }

  void recv(size_t bytes, MsgTag tag, const std::function<void(const void*)>& consume) override {
    if (tag != MsgTag::data || bytes == 0) return host_->recv(bytes, tag, consume);
    void* stage = link_->device_staging(bytes);
    host_->recv(bytes, tag, [&](const void* incoming) {
      link_->copy(stage, incoming, bytes);
      consume(stage);
      link_->synchronize();  // copied and consumed before the host slot is released
    });
  }

  size_t max_message_bytes() const override { return host_->max_message_bytes(); }
  void close() override { host_->close(); }
  RingChannel* control() { return host_.get(); }

 private:
  std::unique_ptr<RingChannel> host_;
  std::shared_ptr<DeviceLink> link_;
};

}  // namespace

std::unique_ptr<RingChannel> make_staging_ring_channel(std::unique_ptr<RingChannel> host,
                                                       std::shared_ptr<DeviceLink> link) {
  RZ_CHECK(host != nullptr && link != nullptr, "cuda transport: a staging channel needs a host channel and a link");
  return std::make_unique<StagingRingChannel>(std::move(host), std::move(link));
}

std::string encode_inbox_record(const InboxRecord& rec) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : rec.handle) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 15]);
  }
  return strfmt("%d %d %u %llu ", rec.pid, rec.device, rec.nslots, static_cast<unsigned long long>(rec.slot_bytes)) +
         hex;
}

bool decode_inbox_record(const std::string& s, InboxRecord& rec) {
  const std::vector<std::string> f = split_spaces(s);
  if (f.size() != 5) return false;
  uint64_t pid = 0, device = 0, nslots = 0, slot_bytes = 0;
  if (!parse_decimal(f[0], pid) || !parse_decimal(f[1], device) || !parse_decimal(f[2], nslots) ||
      !parse_decimal(f[3], slot_bytes))
    return false;
  if (pid == 0 || pid > (1u << 30) || device > 4096 || nslots == 0 || nslots > 1024 || slot_bytes == 0 ||
      slot_bytes > (1ull << 32))
    return false;
  const std::string& hex = f[4];
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() > 2048) return false;
  std::string handle(hex.size() / 2, '\0');
  for (size_t i = 0; i < handle.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    handle[i] = static_cast<char>(hi * 16 + lo);
  }
  rec.pid = static_cast<int>(pid);
  rec.device = static_cast<int>(device);
  rec.nslots = static_cast<uint32_t>(nslots);
  rec.slot_bytes = slot_bytes;
  rec.handle = std::move(handle);
  return true;
}

InboxRecord exchange_inbox_records(StoreClient& store, int rank, int nranks, const InboxRecord& mine,
                                   size_t handle_bytes) {
  store.set(inbox_key(rank), encode_inbox_record(mine));
  const int right = (rank + 1) % nranks;
  const std::string key = inbox_key(right);
  const std::string v = store.get(key);
  InboxRecord rec;
  RZ_CHECK(decode_inbox_record(v, rec),
           "cuda transport, rank %d: store key %s holds %zu characters that are not an inbox record "
           "(expected \"<pid> <device> <nslots> <slot_bytes> <hex handle>\")",
           rank, key.c_str(), v.size());
  RZ_CHECK(rec.handle.size() == handle_bytes,
           "cuda transport, rank %d: store key %s holds a %zu-byte IPC handle, expected %zu", rank, key.c_str(),
           rec.handle.size(), handle_bytes);
  RZ_CHECK(rec.nslots == mine.nslots && rec.slot_bytes == mine.slot_bytes,
           "cuda transport, rank %d: rank %d's inbox has %u slots of %llu bytes, this rank's %u of %llu "
           "(different --segment-bytes?)",
           rank, right, rec.nslots, static_cast<unsigned long long>(rec.slot_bytes), mine.nslots,
           static_cast<unsigned long long>(mine.slot_bytes));
  return rec;
}

uint32_t cuda_inbox_slots() { return kSlotsPerEdge + 1; }

RingChannel* control_channel_of(RingChannel* channel) {
  if (auto* d = dynamic_cast<DeviceRingChannel*>(channel)) return d->control();
  if (auto* st = dynamic_cast<StagingRingChannel*>(channel)) return st->control();
  return nullptr;
}

std::unique_ptr<RingChannel> make_device_ring_channel(std::unique_ptr<RingChannel> control, uint32_t control_lookahead,
                                                      std::shared_ptr<DeviceLink> link, void* right_inbox,
                                                      uint32_t nslots, size_t slot_bytes, int rank, int nranks) {
  RZ_CHECK(control != nullptr && link != nullptr, "cuda transport: a channel needs a control channel and a link");
  RZ_CHECK(nslots >= control_lookahead + 1,
           "cuda transport: %u device slots per edge cannot follow a control channel that runs %u messages ahead "
           "(needs at least %u)",
           nslots, control_lookahead, control_lookahead + 1);
  RZ_CHECK(slot_bytes >= 1, "cuda transport: slot size 0");
  return std::make_unique<DeviceRingChannel>(std::move(control), std::move(link), right_inbox, nslots, slot_bytes, rank,
                                             nranks);
}

std::unique_ptr<RingChannel> connect_cuda_channel(const RankEnv& env, const CommOptions& opts, StoreClient& store,
                                                  std::shared_ptr<DeviceLink> link, size_t slot_bytes) {
  CommOptions control_opts = opts;
  control_opts.segment_bytes = 64;  // notices, fingerprints and barrier tokens only
  std::unique_ptr<RingChannel> control = connect_shm_channel(env, control_opts, store);
  InboxRecord mine;
  mine.pid = static_cast<int>(getpid());
  mine.device = link->device();
  mine.nslots = cuda_inbox_slots();
  mine.slot_bytes = slot_bytes;
  mine.handle = link->inbox_handle();
  const InboxRecord right = exchange_inbox_records(store, env.rank, env.world_size, mine, link->handle_bytes());
  void* right_inbox = link->open_inbox(right);
  return make_device_ring_channel(std::move(control), kSlotsPerEdge, std::move(link), right_inbox, mine.nslots,
                                  slot_bytes, env.rank, env.world_size);
}

}  // namespace rz
