// diloco::zeromq's framing: a message as a header frame and a payload frame
// (docs/protocol.md), sent without copying the payload and received, checked
// and copied into a pooled buffer.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/error.hpp"
#include "diloco/transport/buffer.hpp"
#include "diloco/transport/crc32c.hpp"
#include "diloco/transport/message.hpp"
#include "diloco/transport/wire.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"

namespace diloco::zeromq::detail {

/// Frees a payload handed to libzmq without copying, on libzmq's I/O thread.
inline void release_payload(void* /*data*/, void* hint) noexcept { delete static_cast<byte_buffer*>(hint); }

/// Sends `prefix` (a routing-id frame, or nothing), the header and the
/// payload of `m` without blocking. The payload is handed to libzmq without a
/// copy; `m` is moved from only once the first frame is queued, after which
/// libzmq accepts the rest of the multipart message.
inline std::error_code send(::zmq::socket_t& s, const std::string* prefix, message& m) {
  const bool payload = !m.payload.empty();
  const auto header = wire::encode_header(m.header, m.payload.bytes());
  try {
    const auto more = ::zmq::send_flags::sndmore | ::zmq::send_flags::dontwait;
    if (prefix) {
      if (!s.send(::zmq::buffer(*prefix), more)) return errc::queue_full;
      if (!s.send(::zmq::buffer(header.data(), header.size()), payload ? more : ::zmq::send_flags::dontwait))
        return errc::queue_full;  // not reached: later parts are never refused
    } else if (!s.send(::zmq::buffer(header.data(), header.size()),
                       payload ? more : ::zmq::send_flags::dontwait)) {
      return errc::queue_full;
    }
    if (payload) {
      auto* owned = new byte_buffer(std::move(m.payload));
      ::zmq::message_t frame(owned->data(), owned->size(), release_payload, owned);
      (void)s.send(frame, ::zmq::send_flags::dontwait);
    }
    m = message{};
    return {};
  } catch (const ::zmq::error_t& e) {
    return from_errno(e.num());
  }
}

/// Receives one whole multipart message without blocking, or nothing.
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

/// Copies `from` to `to` and returns the CRC-32C of the bytes, in blocks of
/// 48 KiB: each block is checksummed, then copied while it is still in
/// cache, so the payload is read from memory once instead of twice
/// (1.1-1.2x the throughput of a checksum pass then a `memcpy` at 1-64 MiB).
inline std::uint32_t copy_and_checksum(std::byte* to, std::span<const std::byte> from) noexcept {
  constexpr std::size_t block = std::size_t{48} << 10;
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < from.size(); at += block) {
    const auto part = from.subspan(at, std::min(block, from.size() - at));
    crc = crc32c(part, crc);
    std::memcpy(to + at, part.data(), part.size());
  }
  return crc;
}

/// Turns frames into a validated message, or an envelope carrying the error.
/// The payload is copied out of libzmq's message into a pooled buffer (whose
/// alignment libzmq's blocks do not have) and checksummed on the way.
/// With `owned` (the ids the sender's key may speak for), a well-formed
/// header naming another learner gives `wire_error::unauthorized`, with the
/// header kept and the payload neither copied nor checked.
inline envelope decode(std::vector<::zmq::message_t>& frames, peer_id from, std::uint64_t max_payload,
                       buffer_pool& pool, const learner_ids* owned = nullptr) {
  envelope e;
  e.from = from;
  auto refuse = [&e](wire_error error) {
    e.error = error;
    return std::move(e);
  };
  if (frames.empty() || frames.size() > 2) return refuse(wire_error::truncated);
  const auto d = wire::decode_header(
      std::span<const std::byte>(static_cast<const std::byte*>(frames[0].data()), frames[0].size()), max_payload);
  if (d.error != wire_error::none) return refuse(d.error);
  if (owned && !owned->contains(d.header.learner)) {
    e.msg.header = d.header;
    return refuse(wire_error::unauthorized);
  }
  const std::span<const std::byte> payload =
      frames.size() == 2 ? std::span<const std::byte>(static_cast<const std::byte*>(frames[1].data()), frames[1].size())
                         : std::span<const std::byte>();
  if (payload.size() != d.payload_bytes) return refuse(wire_error::truncated);
  byte_buffer copy;
  if (!payload.empty()) {
    copy = pool.acquire(payload.size());
    if (copy_and_checksum(copy.data(), payload) != d.payload_crc) return refuse(wire_error::bad_checksum);
  } else if (crc32c(payload) != d.payload_crc) {
    return refuse(wire_error::bad_checksum);
  }
  e.msg.header = d.header;
  e.msg.payload = std::move(copy);
  return e;
}

}  // namespace diloco::zeromq::detail
