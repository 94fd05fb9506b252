// diloco::tcp::server, the syncer's TCP endpoint: it listens, accepts any
// number of learners' connections and makes each one a peer.
#pragma once

#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/transport/tcp/detail/io_core.hpp"
#include "diloco/transport/tcp/options.hpp"

namespace diloco::tcp {

/// The syncer's endpoint: listens on `address:port` (port 0 picks a free one;
/// see `port()`), accepts any number of connections, and makes each one a
/// peer: ids 1, 2, 3, … in accept order. A learner that reconnects is a new
/// peer. `try_send` to a peer whose connection closed fails with
/// `errc::unknown_peer`. A blocking transport; `try_send`, `try_receive` and
/// `receive_for` are thread-safe. Owns one I/O thread.
class server {
 public:
  /// Binds and listens; throws `std::system_error` if it cannot (e.g. the
  /// port is in use).
  server(const ::asio::ip::tcp::endpoint& at, socket_options options = {})
      : core_(options), acceptor_(core_.context()), retry_(core_.context()) {
    acceptor_.open(at.protocol());
    acceptor_.set_option(::asio::socket_base::reuse_address(true));
    acceptor_.bind(at);
    acceptor_.listen();
    endpoint_ = acceptor_.local_endpoint();
    ::asio::post(core_.context(), [this] { accept(); });
    core_.start();
  }

  server(const std::string& address, std::uint16_t port, socket_options options = {})
      : server(::asio::ip::tcp::endpoint(::asio::ip::make_address(address), port), options) {}

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Waits up to `linger` for queued messages, then closes the listener and
  /// every connection and joins the I/O thread.
  ~server() {
    core_.stop([this] {
      std::error_code ignored;
      acceptor_.close(ignored);
      retry_.cancel();
    });
  }

  /// The bound address and port.
  const ::asio::ip::tcp::endpoint& endpoint() const noexcept { return endpoint_; }
  std::uint16_t port() const noexcept { return endpoint_.port(); }

  /// Queues `m` for peer `to` without blocking. Fails with
  /// `errc::unknown_peer` (no such connection, or it closed) or
  /// `errc::queue_full` (past `send_queue_bytes`, or the peer has bytes
  /// queued and `memory_bytes` would be passed); `m` is intact then.
  std::error_code try_send(peer_id to, message& m) { return core_.try_send(to, m, errc::unknown_peer); }

  std::optional<envelope> try_receive() { return core_.try_receive(); }

  /// Sleeps on a condition variable until a message arrives or `timeout` passes.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) { return core_.receive_for(timeout); }

  /// `f` runs on the I/O thread whenever a message arrives into an empty
  /// receive queue (`serve` wakes its loop with it); it must not block.
  void set_arrival_handler(std::function<void()> f) { core_.set_arrival_handler(std::move(f)); }

  /// Open connections.
  std::size_t connections() const { return core_.connections(); }
  /// Bytes of received messages waiting for `try_receive`.
  std::uint64_t receive_queue_bytes() const { return core_.receive_queue_bytes(); }
  /// Where received payloads come from.
  const buffer_pool& pool() const noexcept { return core_.pool(); }

  // The memory budget (`socket_options::memory_bytes`).

  /// Bytes (headers and payloads) queued for all peers together and not
  /// yet written.
  std::uint64_t queued_bytes() const noexcept { return core_.memory().outbound.load(std::memory_order_relaxed); }
  /// Bytes that unfinished inbound messages hold now: what has arrived of
  /// each (grown at most twofold) and 256 bytes of bookkeeping each.
  std::uint64_t unfinished_bytes() const noexcept { return core_.memory().inbound.load(std::memory_order_relaxed); }
  /// Unfinished inbound messages refused as `wire_error::over_budget` (their
  /// connections closed).
  std::uint64_t messages_evicted() const noexcept { return core_.memory().evicted.load(std::memory_order_relaxed); }
  /// `try_send`s refused with `errc::queue_full` because of the budget (not
  /// of the peer's own `send_queue_bytes`).
  std::uint64_t sends_over_budget() const noexcept {
    return core_.memory().sends_refused.load(std::memory_order_relaxed);
  }

 private:
  void accept() {
    acceptor_.async_accept([this](std::error_code ec, ::asio::ip::tcp::socket socket) {
      if (core_.stopping() || ec == ::asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors or memory: try again shortly instead of spinning.
        retry_.expires_after(std::chrono::milliseconds(50));
        retry_.async_wait([this](std::error_code e) {
          if (!e && !core_.stopping()) accept();
        });
        return;
      }
      core_.adopt(std::move(socket), next_peer_++);
      accept();
    });
  }

  detail::io_core core_;
  ::asio::ip::tcp::acceptor acceptor_;
  ::asio::steady_timer retry_;
  ::asio::ip::tcp::endpoint endpoint_;
  peer_id next_peer_ = 1;  ///< I/O thread only
};

static_assert(blocking_transport<server>);

}  // namespace diloco::tcp
