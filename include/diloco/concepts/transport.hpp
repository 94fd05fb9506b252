// The Transport concept: how messages move between learners and the syncer.
#pragma once

#include <chrono>
#include <concepts>
#include <optional>
#include <system_error>

#include "diloco/transport/message.hpp"

namespace diloco {

/// Requirements on a Transport endpoint type `T` (examples: `inproc::endpoint`,
/// `sim::endpoint`). The runtime holds a reference to one endpoint per
/// learner and one for the syncer.
///
/// 1. `t.try_send(to, m)` with a `peer_id` and a `message&`, returning
///    `std::error_code`. Never blocks. On success the message is moved from
///    and will be delivered at most once; on failure (`errc::queue_full`,
///    `errc::unknown_peer`, `errc::closed`) `m` is left intact so the caller can
///    retry. Learners address the syncer as `syncer_peer`.
/// 2. `t.try_receive()` — returns `std::optional<envelope>`: the next message
///    that has arrived, or nothing. Never blocks. `envelope::from` is the
///    sender as the transport knows it, not as the header claims.
///
/// Messages between two endpoints may be lost, delayed, duplicated or
/// reordered by some transports; the runtime tolerates all four.
template <class T>
concept transport = requires(T& t, peer_id to, message& m) {
  { t.try_send(to, m) } -> std::same_as<std::error_code>;
  { t.try_receive() } -> std::same_as<std::optional<envelope>>;
};

/// A Transport whose owner may sleep until a message arrives:
///
/// 3. `t.receive_for(timeout)` with a `std::chrono::nanoseconds` — the next
///    message, waiting at most `timeout` for one; never busy-waits.
///
/// The simulated transport has a virtual clock and is driven by
/// `sim::run` instead, so it does not model this.
template <class T>
concept blocking_transport = transport<T> && requires(T& t, std::chrono::nanoseconds timeout) {
  { t.receive_for(timeout) } -> std::same_as<std::optional<envelope>>;
};

namespace detail {

/// Fails compilation with a message naming the first requirement `T` misses.
template <class T>
consteval bool check_transport() {
  static_assert(requires(T& t, peer_id to, message& m) { { t.try_send(to, m) } -> std::same_as<std::error_code>; },
                "diloco::transport: missing member `std::error_code try_send(peer_id to, message& m)`");
  static_assert(requires(T& t) { { t.try_receive() } -> std::same_as<std::optional<envelope>>; },
                "diloco::transport: missing member `std::optional<envelope> try_receive()`");
  return true;
}

}  // namespace detail
}  // namespace diloco
