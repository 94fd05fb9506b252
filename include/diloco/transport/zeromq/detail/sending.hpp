// diloco::zeromq's sending side of the framing (framing.hpp): a message lent
// to libzmq without a copy, header frame then payload chunks, each counted in
// bytes against its peer's queue and the endpoint's memory budget until
// libzmq lets go of it.
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
  const std::size_t chunk =
      o.chunk_bytes == 0 || n == 0 ? n : static_cast<std::size_t>(std::min<std::uint64_t>(o.chunk_bytes, n));
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

}  // namespace diloco::zeromq::detail
