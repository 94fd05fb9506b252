// The settings of diloco::zeromq's `server` and `client`: payload limit, queue
// budgets, heartbeats, reconnection and linger.
#pragma once

#include <chrono>
#include <cstdint>

namespace diloco::zeromq {

/// Socket settings shared by both ends.
struct socket_options {
  /// Largest payload accepted; also sets `ZMQ_MAXMSGSIZE` (libzmq drops a peer
  /// that announces more).
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  /// Bytes the send and receive queues may hold, and the size of a typical
  /// message: the high-water marks are `queue_bytes / message_bytes` messages,
  /// so that the budget is in bytes whatever the fragment size.
  std::uint64_t queue_bytes = std::uint64_t{1} << 30;
  std::uint64_t message_bytes = std::uint64_t{16} << 20;
  /// ZeroMQ's own heartbeats (ZMTP PING/PONG): a silent connection is closed
  /// after `heartbeat_timeout`, and the DEALER reconnects.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{2000};
  /// How long unsent messages may delay closing the socket.
  std::chrono::milliseconds linger{1000};
};

}  // namespace diloco::zeromq
