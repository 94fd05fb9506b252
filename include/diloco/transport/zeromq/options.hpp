// The settings of diloco::zeromq's `server` and `client`: payload limit, queue
// and memory budgets, chunking, heartbeats, reconnection and linger.
#pragma once

#include <chrono>
#include <cstdint>

namespace diloco::zeromq {

/// Socket settings shared by both ends.
struct socket_options {
  /// Largest payload accepted; also sets `ZMQ_MAXMSGSIZE` (libzmq drops a peer
  /// that announces more).
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  /// Bytes (headers and payloads) each peer's send queue may hold:
  /// `try_send` reports `errc::queue_full` beyond (a larger message still
  /// goes when nothing is queued). The receive queue holds `queue_bytes /
  /// min(chunk_bytes, message_bytes)` ZeroMQ messages (libzmq counts
  /// messages, not bytes); `message_bytes` is the typical message from a
  /// peer that does not chunk.
  std::uint64_t queue_bytes = std::uint64_t{1} << 30;
  std::uint64_t message_bytes = std::uint64_t{16} << 20;
  /// What peers can make this endpoint hold, all together: the buffers of
  /// unfinished inbound messages (what has arrived of each, grown at most
  /// twofold, not what its header announces) and the bytes queued for
  /// sending. Past it, `try_send` to a peer that already has bytes queued
  /// reports `errc::queue_full` (a peer with nothing queued always gets its
  /// next message), and the unfinished messages that advanced least recently
  /// are refused as `wire_error::over_budget` and freed (never the one that
  /// is arriving). Size it for the messages honest peers send at once: on
  /// a syncer, learners × the largest payload, plus the updates in flight.
  std::uint64_t memory_bytes = std::uint64_t{256} << 20;
  /// Payloads larger than this go as parts of this size (docs/protocol.md,
  /// "Framing"), so that libzmq's receive buffers are reused instead of
  /// page-faulted in and each part is copied out while still in cache;
  /// 0 sends every payload whole. Receiving takes any size.
  std::uint64_t chunk_bytes = std::uint64_t{1} << 20;
  /// A message whose parts stop arriving for this long is refused as
  /// `wire_error::truncated` and its buffer freed (its sender is gone).
  std::chrono::milliseconds partial_timeout{30000};
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
