// The settings of diloco::tcp's `server` and `client`: queue and memory
// budgets, payload limit, reconnection and keepalive timing.
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
  /// connection is closed. A payload is read in pieces of at most 1 MiB into
  /// a buffer that grows as it arrives (see `memory_bytes`).
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  /// Bytes queued for writing on one connection. A `try_send` that would go
  /// past it fails with `errc::queue_full` (one message is always admitted
  /// into an empty queue, whatever its size).
  std::uint64_t send_queue_bytes = std::uint64_t{1} << 30;
  /// Bytes of received messages waiting for `try_receive`. Past it the
  /// endpoint stops reading from its sockets until the queue drains, and TCP
  /// flow control holds the senders back; the queue overshoots by at most the
  /// messages that were unfinished then (bounded by `memory_bytes`) and one
  /// more.
  std::uint64_t receive_queue_bytes = std::uint64_t{1} << 30;
  /// What peers can make this endpoint hold, all together: the buffers of
  /// unfinished inbound messages (what has arrived of each, grown at most
  /// twofold, not what its header announces) and the bytes queued for
  /// sending on every connection. Past it, `try_send` to a peer that already
  /// has bytes queued fails with `errc::queue_full` (a peer with nothing
  /// queued always gets its next message), and the connections whose
  /// unfinished messages advanced least recently are closed, each message
  /// refused once as `wire_error::over_budget` (never the one that is
  /// arriving). Size it for the messages honest peers send at once: on a
  /// syncer, learners × the largest payload, plus the updates in flight.
  std::uint64_t memory_bytes = std::uint64_t{256} << 20;
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
