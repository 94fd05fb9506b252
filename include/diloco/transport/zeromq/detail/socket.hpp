// How diloco::zeromq sets up its sockets, maps libzmq's errors, and waits on
// one socket with a timeout.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <system_error>

#include "diloco/error.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/transport/zeromq/options.hpp"

namespace diloco::zeromq::detail {

/// The receive high-water mark, in ZeroMQ messages: the byte budget over
/// the size of one part.
inline int receive_high_water_mark(const socket_options& o) {
  const std::uint64_t part = o.chunk_bytes == 0 ? o.message_bytes : std::min(o.chunk_bytes, o.message_bytes);
  const std::uint64_t n = o.queue_bytes / std::max<std::uint64_t>(1, part);
  return static_cast<int>(std::clamp<std::uint64_t>(n, 4, 1u << 20));
}

inline void configure(::zmq::socket_t& s, const socket_options& o) {
  s.set(::zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(o.max_payload_bytes + wire::header_size));
  s.set(::zmq::sockopt::sndhwm, 0);  // no limit in messages: `send` keeps a budget in bytes
  s.set(::zmq::sockopt::rcvhwm, receive_high_water_mark(o));
  s.set(::zmq::sockopt::heartbeat_ivl, static_cast<int>(o.heartbeat_interval.count()));
  s.set(::zmq::sockopt::heartbeat_timeout, static_cast<int>(o.heartbeat_timeout.count()));
  s.set(::zmq::sockopt::heartbeat_ttl, static_cast<int>(o.heartbeat_timeout.count()));
  s.set(::zmq::sockopt::reconnect_ivl, static_cast<int>(o.reconnect_interval.count()));
  s.set(::zmq::sockopt::reconnect_ivl_max, static_cast<int>(o.reconnect_interval_max.count()));
  s.set(::zmq::sockopt::linger, static_cast<int>(o.linger.count()));
}

inline std::error_code from_errno(int e) {
  switch (e) {
    case EAGAIN: return errc::queue_full;
    case EHOSTUNREACH: return errc::unknown_peer;
    case ETERM:
    case ENOTSOCK: return errc::closed;
    default: return {e, std::generic_category()};
  }
}

/// Calls `try_receive` until it gives a message or `timeout` has passed;
/// in between, `wait(now, time_left)` blocks until there may be more (false:
/// give up). A timeout of zero still tries once.
template <class TryReceive, class Wait>
auto receive_within(std::chrono::nanoseconds timeout, TryReceive&& try_receive, Wait&& wait)
    -> decltype(try_receive()) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::max(timeout, std::chrono::nanoseconds::zero());
  for (;;) {
    if (auto e = try_receive()) return e;
    const auto now = clock::now();
    if (now >= deadline || !wait(now, deadline - now)) return {};
  }
}

inline bool wait_readable(::zmq::socket_t& s, std::chrono::nanoseconds timeout) {
  ::zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, std::chrono::nanoseconds::zero()));
  try {
    return ::zmq::poll(&item, 1, ms) > 0;
  } catch (const ::zmq::error_t&) {
    return false;
  }
}

}  // namespace diloco::zeromq::detail
