// One connection of diloco::tcp (io_core.hpp): its socket and peer, its send
// queue and the state of the message being read; the socket options every
// connection gets (no Nagle delay, keepalive probes).
#pragma once

#include <asio/ip/tcp.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#endif

#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/transport/tcp/options.hpp"

namespace diloco::tcp::detail {

/// A message waiting to be written: its encoded header, and the payload
/// (written from where it is, never copied).
struct outgoing {
  std::array<std::byte, wire::header_size> header{};
  byte_buffer payload;
  std::uint64_t size() const noexcept { return wire::header_size + payload.size(); }
};

/// One TCP connection, one peer.
struct connection {
  connection(::asio::ip::tcp::socket s, peer_id peer) : socket(std::move(s)), id(peer) {}

  ::asio::ip::tcp::socket socket;
  const peer_id id;
  // I/O thread only.
  std::array<std::byte, wire::header_size> header_in{};
  wire::decoded_header decoded;
  byte_buffer payload_in;      ///< its capacity, not its size, is what fits (the size is set when complete)
  std::uint64_t received = 0;  ///< payload bytes read into `payload_in`
  std::vector<outgoing> in_flight;
  std::vector<::asio::const_buffer> gather;
  // Guarded by io_core::mutex_.
  std::deque<outgoing> queue;
  std::uint64_t queued_bytes = 0;  ///< in `queue` and `in_flight`
  bool writing = false;            ///< a write is posted or running
  bool open = true;
};

using connection_ptr = std::shared_ptr<connection>;

/// Messages gathered into one write (two buffers each).
inline constexpr std::size_t max_gather = 32;

/// The most payload bytes one read asks for: a payload is read in pieces
/// into a buffer that grows as they arrive, never allocated whole on the
/// word of its header.
inline constexpr std::size_t read_piece_bytes = std::size_t{1} << 20;

/// Payload bytes a header announces (what the receiver will read after it);
/// nothing for a block-scaled codec without a block size, which no receiver
/// accepts.
inline std::optional<std::uint64_t> announced_payload(const message_header& h) noexcept {
  if (!wire::carries_payload(h.kind)) return 0;
  if (block_scaled(h.codec) && h.block == 0) return std::nullopt;
  return wire::payload_size(h.codec, h.element_count, h.block);
}

inline void configure(::asio::ip::tcp::socket& s, const socket_options& o) {
  std::error_code ignored;
  s.set_option(::asio::ip::tcp::no_delay(true), ignored);
  if (o.keepalive_idle.count() <= 0) return;
  s.set_option(::asio::socket_base::keep_alive(true), ignored);
#if defined(__linux__) && defined(TCP_KEEPIDLE)
  const int fd = s.native_handle();
  const int idle = static_cast<int>(o.keepalive_idle.count());
  const int interval = static_cast<int>(std::max<std::int64_t>(1, o.keepalive_interval.count()));
  const int probes = std::max(1, o.keepalive_probes);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
#endif
}

}  // namespace diloco::tcp::detail
