// diloco::zeromq's framing (docs/protocol.md, "Framing"): a message is a
// header frame and a payload frame; a payload larger than a chunk goes as
// that first message with its first chunk, then one continuation message per
// further chunk. Payloads are lent to libzmq without a copy, counted in bytes
// until libzmq lets go of them, and received into pooled buffers reused from
// message to message, checksummed on the way.
//
// Why chunks: libzmq allocates every received frame with `malloc`. A 64 MiB
// frame is a fresh mapping whose 16 384 pages all fault while the kernel
// fills it (0.27 GB/s here against 3 GB/s for a raw socket), and even a
// 16 MiB one is read back from memory, long out of cache, when it is copied
// out. Frames of 1 MiB are served from malloc's free lists, and each is
// copied into the reassembled payload while the kernel's write is still in
// cache, one chunk behind the socket.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "diloco/error.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/crc32c.hpp"
#include "diloco/transport/detail/memory_budget.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"
#include "diloco/transport/zeromq/options.hpp"

namespace diloco::zeromq::detail {

// --- continuation frames ------------------------------------------------------

/// The first frame of a continuation message: magic "DLCC", u32 index (1 for
/// the second part of a payload, 2 for the third, ...), u64 offset of the
/// part's first byte in the payload; little-endian.
inline constexpr std::size_t continuation_size = 16;
inline constexpr std::array<std::byte, 4> continuation_magic{std::byte{'D'}, std::byte{'L'}, std::byte{'C'},
                                                             std::byte{'C'}};

struct continuation {
  std::uint32_t index = 0;
  std::uint64_t offset = 0;
};

inline std::array<std::byte, continuation_size> encode_continuation(continuation c) noexcept {
  std::array<std::byte, continuation_size> out{};
  std::memcpy(out.data(), continuation_magic.data(), 4);
  std::memcpy(out.data() + 4, &c.index, 4);
  std::memcpy(out.data() + 8, &c.offset, 8);
  return out;
}

/// The continuation a frame announces, or nothing if it is not one.
inline std::optional<continuation> decode_continuation(std::span<const std::byte> frame) noexcept {
  if (frame.size() != continuation_size || std::memcmp(frame.data(), continuation_magic.data(), 4) != 0)
    return std::nullopt;
  continuation c;
  std::memcpy(&c.index, frame.data() + 4, 4);
  std::memcpy(&c.offset, frame.data() + 8, 8);
  return c;
}

// --- sending --------------------------------------------------------------------

/// Bytes of one peer's messages that libzmq holds (queued, or being written
/// to the connection): headers and payloads. libzmq's high-water marks count
/// messages, whatever their size, so the send budget is kept here, in
/// bytes: the count goes up when a frame is handed over and down, on
/// libzmq's I/O thread, when libzmq lets go of it (written, or dropped with
/// its connection).
using queued_bytes = std::atomic<std::uint64_t>;

/// A message lent to libzmq: its header frame, and its payload as parts of
/// `chunk` bytes (the last one shorter); freed when libzmq and the sender
/// have let go of every frame. Each frame is counted in its peer's
/// `queued` and its endpoint's `memory_use::outbound` until libzmq lets go
/// of it; the payload buffer's capacity beyond its size (`slack`: whole
/// pages, or whole 2 MiB huge pages, which a payload just past one fills
/// with a page of its own) in `outbound` until the message is freed, so
/// that the budget bounds the memory queued, not only its bytes.
struct lent_message {
  std::array<std::byte, wire::header_size> header{};
  byte_buffer payload;
  std::shared_ptr<queued_bytes> queued;
  std::shared_ptr<diloco::detail::memory_use> use;
  std::size_t chunk = 0;
  std::size_t slack = 0;
  std::atomic<std::size_t> holders{1};  ///< the sender, until every frame is handed over

  ~lent_message() { use->outbound.fetch_sub(slack, std::memory_order_relaxed); }

  /// Counts `bytes` more held by libzmq.
  void hold(std::size_t bytes) noexcept {
    holders.fetch_add(1, std::memory_order_relaxed);
    queued->fetch_add(bytes, std::memory_order_relaxed);
    use->outbound.fetch_add(bytes, std::memory_order_relaxed);
  }

  void let_go() noexcept {
    if (holders.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

/// libzmq's release of one frame (zero-copy message free function).
inline void release_frame(void* data, void* hint) noexcept {
  auto* lent = static_cast<lent_message*>(hint);
  const auto* at = static_cast<const std::byte*>(data);
  const std::size_t bytes =
      at == lent->header.data()
          ? wire::header_size
          : std::min(lent->chunk, lent->payload.size() - static_cast<std::size_t>(at - lent->payload.data()));
  lent->queued->fetch_sub(bytes, std::memory_order_relaxed);
  lent->use->outbound.fetch_sub(bytes, std::memory_order_relaxed);
  lent->let_go();
}

/// Sends `prefix` (a routing-id frame, or nothing) and `m` without blocking,
/// without copying the header or the payload, the payload in parts of at
/// most `o.chunk_bytes`.
///
/// `errc::queue_full`, and `m` kept, when libzmq takes no message now (no
/// connection yet), or when `queued` (this peer's bytes held by libzmq) is
/// not zero and the message would take it past `o.queue_bytes` or take
/// what the endpoint holds (`use`) past `o.memory_bytes`: a peer with
/// nothing queued always gets its next message, whatever its size. Once the
/// header is taken the message is committed: `m` is emptied, and a later
/// part that libzmq refuses (its connection went away meanwhile) is lost
/// with the connection, as queued messages are.
inline std::error_code send(::zmq::socket_t& s, const std::string* prefix, message& m, const socket_options& o,
                            const std::shared_ptr<queued_bytes>& queued,
                            const std::shared_ptr<diloco::detail::memory_use>& use) {
  const std::size_t n = m.payload.size();
  const std::uint64_t bytes = wire::header_size + n;
  const std::uint64_t held = queued->load(std::memory_order_relaxed);
  if (held > 0 && held + bytes > o.queue_bytes) return errc::queue_full;
  if (!diloco::detail::admit_send(*use, o.memory_bytes, held, wire::header_size + std::max(n, m.payload.capacity())))
    return errc::queue_full;
  const auto more = ::zmq::send_flags::sndmore | ::zmq::send_flags::dontwait;
  try {
    if (prefix && !s.send(::zmq::buffer(*prefix), more)) return errc::queue_full;
  } catch (const ::zmq::error_t& e) {
    return from_errno(e.num());
  }
  // After a routing id, libzmq never refuses the rest of the message.
  const std::size_t chunk = o.chunk_bytes == 0 || n == 0 ? n : static_cast<std::size_t>(std::min<std::uint64_t>(o.chunk_bytes, n));
  auto* lent = new lent_message{};
  wire::encode_header(m.header, m.payload.bytes(), lent->header);
  lent->payload = std::move(m.payload);
  lent->queued = queued;
  lent->use = use;
  lent->chunk = chunk;
  bool taken = false;
  try {
    lent->hold(wire::header_size);
    ::zmq::message_t header(lent->header.data(), lent->header.size(), release_frame, lent);  // released if not sent
    taken = s.send(header, n ? more : ::zmq::send_flags::dontwait).has_value();
  } catch (const ::zmq::error_t& e) {
    m.payload = std::move(lent->payload);
    lent->let_go();
    return from_errno(e.num());
  }
  if (!taken) {
    m.payload = std::move(lent->payload);
    lent->let_go();
    return errc::queue_full;
  }
  m = message{};
  lent->slack = lent->payload.capacity() - n;
  use->outbound.fetch_add(lent->slack, std::memory_order_relaxed);
  try {
    std::uint32_t index = 0;
    for (std::size_t offset = 0; offset < n; offset += chunk, ++index) {
      const std::size_t part = std::min(chunk, n - offset);
      lent->hold(part);
      ::zmq::message_t frame(lent->payload.data() + offset, part, release_frame, lent);  // released if not sent
      if (index > 0) {
        const auto c = encode_continuation({index, offset});
        if (prefix && !s.send(::zmq::buffer(*prefix), more)) break;
        if (!s.send(::zmq::buffer(c.data(), c.size()), more)) break;
      }
      if (!s.send(frame, ::zmq::send_flags::dontwait)) break;
    }
  } catch (const ::zmq::error_t&) {
    // The connection went away after the message was committed.
  }
  lent->let_go();
  return {};
}

// --- receiving ------------------------------------------------------------------

/// One whole ZeroMQ multipart message, received without blocking.
/// `routed`: the first frame is a routing id (ROUTER side).
struct raw_message {
  std::string routing_id;
  std::vector<::zmq::message_t> frames;
};

inline std::optional<raw_message> receive_raw(::zmq::socket_t& s, bool routed) {
  raw_message r;
  ::zmq::message_t frame;
  try {
    if (!s.recv(frame, ::zmq::recv_flags::dontwait)) return std::nullopt;
    bool more = frame.more();
    if (routed) {
      r.routing_id.assign(static_cast<const char*>(frame.data()), frame.size());
      if (!more) return r;
      (void)s.recv(frame, ::zmq::recv_flags::none);  // parts of a message arrive together
      more = frame.more();
    }
    r.frames.push_back(std::move(frame));
    // Never keep more than three frames of a hostile message; drain the rest.
    while (more) {
      ::zmq::message_t next;
      (void)s.recv(next, ::zmq::recv_flags::none);
      more = next.more();
      if (r.frames.size() < 3) r.frames.push_back(std::move(next));
    }
  } catch (const ::zmq::error_t&) {
    return std::nullopt;
  }
  return r;
}

inline std::span<const std::byte> bytes_of(const ::zmq::message_t& frame) noexcept {
  return {static_cast<const std::byte*>(frame.data()), frame.size()};
}

/// Copies `from` to `to` and returns the CRC-32C of the bytes continued from
/// `crc`, in blocks of 48 KiB: each block is checksummed, then copied while
/// it is still in cache, so the bytes are read from memory once instead of
/// twice (1.1-1.2x the throughput of a checksum pass then a `memcpy`).
inline std::uint32_t copy_and_checksum(std::byte* to, std::span<const std::byte> from, std::uint32_t crc = 0) noexcept {
  constexpr std::size_t block = std::size_t{48} << 10;
  for (std::size_t at = 0; at < from.size(); at += block) {
    const auto part = from.subspan(at, std::min(block, from.size() - at));
    crc = crc32c(part, crc);
    std::memcpy(to + at, part.data(), part.size());
  }
  return crc;
}

/// Turns the ZeroMQ messages of every peer into envelopes: decodes headers,
/// reassembles chunked payloads into pooled buffers (one message in progress
/// per peer), checks them, and refuses what is malformed with a `wire_error`
/// — once per message, however many parts it had. Never trusts a size or an
/// offset a peer sends: a part must continue the payload exactly where the
/// previous one ended and not pass the size the header announced.
///
/// Memory: an unfinished message holds what has arrived of it, never what
/// its header announces. Its buffer is a pooled one that fits the whole
/// payload when one is cached and the budget has room for it (its pages are
/// resident already: the steady state of honest traffic, nothing copied);
/// otherwise one that fits the first part, doubled (at most to the payload
/// size) whenever a part does not fit, so that it holds at most twice what
/// has arrived and each byte is copied at most once more on average. What
/// every unfinished message holds counts against `memory_bytes` with what
/// the endpoint's sends hold (`memory_use`); past it the messages that
/// advanced least recently are refused as `wire_error::over_budget` and
/// freed, never the one whose part just arrived, and their remaining parts
/// are dropped.
///
/// libzmq reports no closed connection by routing id (its monitor names a
/// file descriptor, which the next connection may reuse), so a message whose
/// sender went away is freed by the budget or after `partial_timeout`.
class inbox {
 public:
  using clock = std::chrono::steady_clock;

  /// `use`: what the endpoint holds, shared with its sends (nullptr: this
  /// inbox's own count).
  explicit inbox(const socket_options& o, std::shared_ptr<diloco::detail::memory_use> use = nullptr)
      : max_payload_(o.max_payload_bytes),
        stall_(o.partial_timeout),
        use_(use ? std::move(use) : std::make_shared<diloco::detail::memory_use>()),
        held_(*use_, o.memory_bytes) {}

  /// Takes one ZeroMQ message (its frames after the routing id) from `from`.
  /// `owned`: the learner ids the sender's CURVE key may speak for (nullptr:
  /// any). What it completes or refuses comes out of `pop`.
  void take(std::vector<::zmq::message_t>& frames, peer_id from, const learner_ids* owned, clock::time_point now) {
    if (frames.empty() || frames.size() > 2) return refuse(from, wire_error::truncated);
    if (auto c = decode_continuation(bytes_of(frames[0]))) return take_part(*c, frames, from, now);
    if (auto it = partial_.find(from); it != partial_.end()) {
      // A new message while one is unfinished: the rest of that one is not
      // coming (a peer that reconnects, or one that breaks the protocol).
      if (!it->second.discard) refuse(from, wire_error::truncated);
      drop(it);
    }
    const auto d = wire::decode_header(bytes_of(frames[0]), max_payload_);
    if (d.error != wire_error::none) return refuse(from, d.error);
    const auto first = frames.size() == 2 ? bytes_of(frames[1]) : std::span<const std::byte>();
    if (first.size() > d.payload_bytes || (first.empty() && d.payload_bytes > 0))
      return refuse(from, wire_error::truncated);
    partial p;
    p.header = d.header;
    p.expected_crc = d.payload_crc;
    p.total = d.payload_bytes;
    p.last = now;
    if (owned && !owned->contains(d.header.learner)) {
      // Checked before any payload byte is copied; the rest is dropped unread.
      refuse(from, wire_error::unauthorized, &d.header);
      p.discard = true;
    } else if (p.total > first.size()) {
      p.payload = first_buffer(p.total, first.size());
    } else if (p.total > 0) {
      p.payload = pool_.acquire(static_cast<std::size_t>(p.total));  // whole: it has all arrived
    }
    append(p, first);
    if (p.received == p.total) return finish(from, p);
    auto& kept = partial_.insert_or_assign(from, std::move(p)).first->second;
    advanced(from, kept);
  }

  /// The next complete or refused message, if any.
  std::optional<envelope> pop() {
    if (ready_.empty()) return std::nullopt;
    auto e = std::move(ready_.front());
    ready_.pop_front();
    return e;
  }

  /// Refuses (as `truncated`) every message whose parts have not advanced
  /// for `partial_timeout`; its sender is gone or stuck. Call when the
  /// socket has nothing left to read, so that a receiver that was busy
  /// does not blame parts still waiting in libzmq's queue. Costs one step
  /// per message refused, and one more.
  void expire(clock::time_point now) {
    while (const peer_id* oldest = held_.oldest()) {
      const auto it = partial_.find(*oldest);
      if (now - it->second.last < stall_) return;
      if (!it->second.discard) refuse(it->first, wire_error::truncated);
      drop(it);
    }
  }

  /// Messages in progress (parts received, more expected).
  std::size_t in_progress() const noexcept { return partial_.size(); }
  /// Bytes the messages in progress hold: their buffers, and 256 bytes of
  /// bookkeeping each (`detail::unfinished_entry_bytes`).
  std::uint64_t unfinished_bytes() const noexcept { return held_.bytes(); }

 private:
  struct partial {
    message_header header{};
    std::uint32_t expected_crc = 0;
    std::uint64_t total = 0;
    std::uint64_t received = 0;
    std::uint32_t crc = 0;
    std::uint32_t next_index = 1;
    clock::time_point last{};
    bool discard = false;  ///< refused already: the remaining parts are dropped unread
    byte_buffer payload;   ///< its capacity, not its size, is what fits (the size is set when complete)
  };

  void take_part(continuation c, std::vector<::zmq::message_t>& frames, peer_id from, clock::time_point now) {
    const auto it = partial_.find(from);
    if (it == partial_.end()) return refuse(from, wire_error::truncated);  // a part of no message
    auto& p = it->second;
    const auto part = frames.size() == 2 ? bytes_of(frames[1]) : std::span<const std::byte>();
    p.last = now;
    if (c.index != p.next_index || c.offset != p.received || part.empty() || part.size() > p.total - p.received) {
      // Refused once; the parts that follow are dropped until the next
      // header or `partial_timeout`.
      if (!p.discard) refuse(from, wire_error::truncated);
      p.discard = true;
      p.payload = {};
      return advanced(from, p);
    }
    ++p.next_index;
    append(p, part);
    if (p.received < p.total) return advanced(from, p);
    auto done = std::move(p);
    drop(it);
    finish(from, done);
  }

  /// The buffer of a message of `total` bytes whose first `first` bytes
  /// arrived (`first < total`).
  byte_buffer first_buffer(std::uint64_t total, std::size_t first) {
    const std::uint64_t held = use_->held() + diloco::detail::unfinished_entry_bytes;
    const std::uint64_t limit = held_.limit();
    if (held < limit && total <= limit - held) {
      auto cached = pool_.acquire_cached(static_cast<std::size_t>(total), static_cast<std::size_t>(limit - held));
      if (cached.data()) return cached;
    }
    return fitting(first);
  }

  /// A buffer of exactly the capacity a fresh one for `bytes` would have,
  /// from the pool if it holds one: what a message holds stays what has
  /// arrived, however large the blocks the pool caches.
  byte_buffer fitting(std::uint64_t bytes) {
    const auto n = static_cast<std::size_t>(bytes);
    return pool_.acquire(n, diloco::detail::capacity_for(n));
  }

  void append(partial& p, std::span<const std::byte> part) {
    if (!p.discard && !part.empty()) {
      if (p.payload.capacity() - p.received < part.size()) grow(p, p.received + part.size());
      p.crc = copy_and_checksum(p.payload.data() + p.received, part, p.crc);
    }
    p.received += part.size();
  }

  /// Moves `p`'s payload into a buffer that fits `needed` bytes: twice the
  /// capacity, at least `needed`, at most the payload size. Copies what has
  /// arrived; the old buffer goes back to the pool.
  void grow(partial& p, std::uint64_t needed) {
    const auto capacity = diloco::detail::grown_capacity(p.payload.capacity(), needed, p.total);
    auto bigger = fitting(capacity);
    if (p.received > 0) std::memcpy(bigger.data(), p.payload.data(), static_cast<std::size_t>(p.received));
    p.payload = std::move(bigger);
  }

  /// `from`'s message `p` advanced: counts what it holds, then lets the
  /// least recently advanced messages go while the endpoint holds more than
  /// its budget.
  void advanced(peer_id from, const partial& p) {
    held_.advanced(from, p.payload.capacity() + diloco::detail::unfinished_entry_bytes);
    held_.evict(from, [this](peer_id victim) -> std::uint64_t {
      const auto it = partial_.find(victim);
      if (it->second.discard) {
        partial_.erase(it);  // its remaining parts will be refused as parts of no message
        return 0;
      }
      refuse(victim, wire_error::over_budget);
      use_->evicted.fetch_add(1, std::memory_order_relaxed);
      it->second.discard = true;
      it->second.payload = {};
      return diloco::detail::unfinished_entry_bytes;
    });
  }

  void drop(std::unordered_map<peer_id, partial>::iterator it) {
    held_.forget(it->first);
    partial_.erase(it);
  }

  void finish(peer_id from, partial& p) {
    if (p.discard) return;
    if (p.crc != p.expected_crc) return refuse(from, wire_error::bad_checksum);
    envelope e;
    e.from = from;
    e.msg.header = p.header;
    p.payload.resize(static_cast<std::size_t>(p.total));
    e.msg.payload = std::move(p.payload);
    ready_.push_back(std::move(e));
  }

  /// An envelope carrying `error` and no message; `unauthorized` keeps the
  /// header its sender claimed.
  void refuse(peer_id from, wire_error error, const message_header* claimed = nullptr) {
    envelope e;
    e.from = from;
    e.error = error;
    if (claimed) e.msg.header = *claimed;
    ready_.push_back(std::move(e));
  }

  std::uint64_t max_payload_;
  clock::duration stall_;
  std::shared_ptr<diloco::detail::memory_use> use_;
  std::unordered_map<peer_id, partial> partial_;
  diloco::detail::unfinished_messages<peer_id> held_;  ///< counted in `*use_`
  std::deque<envelope> ready_;
  buffer_pool pool_;
};

/// The next message of `s`, without blocking: reads ZeroMQ messages into
/// `box` until one completes or is refused (at most 4096 parts a call, so
/// that a receiver streamed at returns now and then). `peer_of(routing_id)`
/// names the sender; `owned_of(frames)` gives what its key may speak for
/// (nullptr: anything).
template <class PeerOf, class OwnedOf>
std::optional<envelope> receive(inbox& box, ::zmq::socket_t& s, bool routed, PeerOf&& peer_of, OwnedOf&& owned_of) {
  for (int parts = 0; parts < 4096; ++parts) {
    if (auto e = box.pop()) return e;
    auto raw = receive_raw(s, routed);
    const auto now = inbox::clock::now();
    if (!raw) {
      box.expire(now);
      return box.pop();
    }
    box.take(raw->frames, peer_of(raw->routing_id), owned_of(raw->frames), now);
  }
  return box.pop();
}

}  // namespace diloco::zeromq::detail
