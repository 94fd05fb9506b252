// The settings of diloco::tcp's `server` and `client`: queue budgets, payload
// limit, reconnection and keepalive timing.
#pragma once

#include <chrono>
#include <cstdint>

namespace diloco::tcp {

/// Settings of both ends. Budgets count header and payload bytes.
///
/// `SO_SNDBUF`/`SO_RCVBUF` are never set: fixing them turns off the kernel's
/// autotuning, which long fat links need.
struct socket_options {
  /// Largest payload accepted; a header announcing more is refused
  /// (`wire_error::oversized`) before anything is allocated for it, and the
  /// connection is closed.
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  /// Bytes queued for writing on one connection. A `try_send` that would go
  /// past it fails with `errc::queue_full` (one message is always admitted
  /// into an empty queue, whatever its size).
  std::uint64_t send_queue_bytes = std::uint64_t{1} << 30;
  /// Bytes of received messages waiting for `try_receive`. Past it the
  /// endpoint stops reading from its sockets until the queue drains, and TCP
  /// flow control holds the senders back; the queue overshoots by at most one
  /// message per connection.
  std::uint64_t receive_queue_bytes = std::uint64_t{1} << 30;
  /// Client: the wait before reconnecting after a lost connection or a failed
  /// attempt, doubled after each failed attempt up to `reconnect_interval_max`.
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{2000};
  /// Client: a connection attempt still pending after this is abandoned.
  std::chrono::milliseconds connect_timeout{5000};
  /// TCP keepalive (Linux): a connection silent for `keepalive_idle` is probed
  /// every `keepalive_interval`; after `keepalive_probes` unanswered probes the
  /// kernel closes it. A zero `keepalive_idle` turns keepalive off.
  std::chrono::seconds keepalive_idle{5};
  std::chrono::seconds keepalive_interval{1};
  int keepalive_probes = 5;
  /// How long the destructor waits for queued messages to be written.
  std::chrono::milliseconds linger{1000};
};

}  // namespace diloco::tcp
