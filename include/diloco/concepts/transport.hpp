// The Transport concept: how messages move between learners and the syncer.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <system_error>

#include "diloco/clock.hpp"
#include "diloco/concepts/check.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco {

/// The requirements of `transport` and `blocking_transport`, one named
/// concept each, numbered as `check_transport` and `check_blocking_transport`
/// walk them.
namespace requirements::transport {

/// 1. `t.try_send(to, m)` with a `peer_id` and a `message&`, returning
///    `std::error_code`. Never blocks. On success the message is moved from
///    and will be delivered at most once; on failure (`errc::queue_full`,
///    `errc::unknown_peer`, `errc::closed`) `m` is left intact so the caller
///    can retry. Learners address the syncer as `syncer_peer`.
template <class T>
concept try_send = requires(T& t, peer_id to, message& m) {
  { t.try_send(to, m) } -> std::same_as<std::error_code>;
};

/// 2. `t.try_receive()` — returns `std::optional<envelope>`: the next message
///    that has arrived, or nothing. Never blocks. `envelope::from` is the
///    sender as the transport knows it, not as the header claims.
template <class T>
concept try_receive = requires(T& t) {
  { t.try_receive() } -> std::same_as<std::optional<envelope>>;
};

/// 3. (blocking transports) `t.receive_for(timeout)` with a
///    `std::chrono::nanoseconds` — the next message, waiting at most `timeout`
///    for one; never busy-waits.
template <class T>
concept receive_for = requires(T& t, std::chrono::nanoseconds timeout) {
  { t.receive_for(timeout) } -> std::same_as<std::optional<envelope>>;
};

/// 4. (timed transports) `t.next_arrival()` on a `const T` — when the next
///    message becomes available in virtual time, or nothing while none is
///    under way.
template <class T>
concept next_arrival = requires(const T& t) {
  { t.next_arrival() } -> std::same_as<std::optional<time_point>>;
};

/// 5. (optional: transports that move between syncers) `t.reconnections()`
///    on a `const T` — how many times it has left a syncer connection to
///    find the one that leads now (a standby that takes over,
///    `zeromq::failover_client`). A learner that sees it grow joins again
///    at once — the join is what the next leader answers — and chases every
///    answer still awaited from the old connection, instead of waiting
///    `learner_options::rejoin_after` for them.
template <class T>
concept reconnections = requires(const T& t) {
  { t.reconnections() } -> std::convertible_to<std::uint64_t>;
};

}  // namespace requirements::transport

/// Requirements on a Transport endpoint type `T`: requirements 1 and 2 above
/// (examples: `inproc::endpoint`, `sim::endpoint`). The runtime holds a
/// reference to one endpoint per learner and one for the syncer.
///
/// Messages between two endpoints may be lost, delayed, duplicated or
/// reordered by some transports; the runtime tolerates all four.
template <class T>
concept transport = requirements::transport::try_send<T> && requirements::transport::try_receive<T>;

/// A Transport whose owner may sleep until a message arrives: requirement 3
/// above as well. The simulated transport has a virtual clock and is driven
/// by `sim::run` instead, so it does not model this.
template <class T>
concept blocking_transport = transport<T> && requirements::transport::receive_for<T>;

/// A Transport that tells when its next message arrives in virtual time:
/// requirement 4 above as well (`sim::endpoint`, or a wrapper such as
/// `chaos::faulty` around one). `sim::run` waits on these.
template <class T>
concept timed_transport = transport<T> && requirements::transport::next_arrival<T>;

/// Returns true if `T` is a transport; otherwise, with `on_unmet::fail`, stops
/// compilation naming the first requirement `T` misses.
template <class T, on_unmet Unmet = on_unmet::fail>
consteval bool check_transport() {
  namespace r = requirements::transport;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::try_send<T>) {
    static_assert(r::try_send<T> || quiet,
                  "diloco::transport: missing member `std::error_code try_send(peer_id to, message& m)`");
    return !quiet;
  } else if constexpr (!r::try_receive<T>) {
    static_assert(r::try_receive<T> || quiet,
                  "diloco::transport: missing member `std::optional<envelope> try_receive()`");
    return !quiet;
  } else {
    return true;
  }
}

/// Returns true if `T` is a blocking transport; otherwise, with
/// `on_unmet::fail`, stops compilation naming the first requirement `T` misses.
template <class T, on_unmet Unmet = on_unmet::fail>
consteval bool check_blocking_transport() {
  namespace r = requirements::transport;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!check_transport<T, on_unmet::return_false>()) {
    return check_transport<T, Unmet>();
  } else if constexpr (!r::receive_for<T>) {
    static_assert(r::receive_for<T> || quiet,
                  "diloco::blocking_transport: missing member `std::optional<envelope> "
                  "receive_for(std::chrono::nanoseconds timeout)`");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
