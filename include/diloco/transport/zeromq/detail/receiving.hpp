// diloco::zeromq's receiving side of the framing (framing.hpp): whole
// multipart messages read without blocking, continuation chunks reassembled
// into pooled buffers (checksummed on the way), unfinished messages held to
// what has arrived and refused past the memory budget.
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
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/transport/detail/memory_budget.hpp"
#include "diloco/transport/zeromq/detail/framing.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"
#include "diloco/transport/zeromq/options.hpp"

namespace diloco::zeromq::detail {

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
