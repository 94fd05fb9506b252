// diloco::tcp::client, a learner's TCP endpoint: it connects to the syncer and
// reconnects by itself, backing off while attempts fail.
#pragma once

#include <asio/connect.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/transport/tcp/detail/io_core.hpp"
#include "diloco/transport/tcp/options.hpp"

namespace diloco::tcp {

/// A learner's endpoint: connects to the syncer at `host:port` (a numeric
/// address or a name to resolve) and reconnects by itself when the
/// connection drops or cannot be made, after `reconnect_interval`, doubling
/// up to `reconnect_interval_max` while attempts fail. Messages queue only on
/// a live connection: without one `try_send` fails with `errc::queue_full`
/// and the caller keeps the message (like ZeroMQ's `ZMQ_IMMEDIATE`).
/// Messages still queued when a connection dies are lost. A blocking
/// transport; `try_send`, `try_receive` and `receive_for` are thread-safe.
/// Owns one I/O thread.
class client {
 public:
  client(std::string host, std::uint16_t port, socket_options options = {})
      : core_(options),
        host_(std::move(host)),
        port_(port),
        resolver_(core_.context()),
        timer_(core_.context()),
        delay_(options.reconnect_interval) {
    core_.on_closed([this](peer_id) { retry_after(core_.options().reconnect_interval); });
    ::asio::post(core_.context(), [this] { connect(); });
    core_.start();
  }

  client(const ::asio::ip::tcp::endpoint& syncer, socket_options options = {})
      : client(syncer.address().to_string(), syncer.port(), options) {}

  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Waits up to `linger` for queued messages, then closes the connection and
  /// joins the I/O thread.
  ~client() {
    core_.stop([this] {
      std::error_code ignored;
      resolver_.cancel();
      timer_.cancel();
      if (attempt_) attempt_->close(ignored);
    });
  }

  /// Queues `m` for the syncer (`to` must be `syncer_peer`, else
  /// `errc::unknown_peer`) without blocking. Fails with `errc::queue_full`
  /// while disconnected, past `send_queue_bytes`, or when bytes are queued
  /// and `memory_bytes` would be passed; `m` is intact then.
  std::error_code try_send(peer_id to, message& m) {
    if (to != syncer_peer) return errc::unknown_peer;
    return core_.try_send(syncer_peer, m, errc::queue_full);
  }

  std::optional<envelope> try_receive() { return core_.try_receive(); }

  /// Sleeps on a condition variable until a message arrives or `timeout` passes.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) { return core_.receive_for(timeout); }

  /// `f` runs on the I/O thread whenever a message arrives into an empty
  /// receive queue; it must not block.
  void set_arrival_handler(std::function<void()> f) { core_.set_arrival_handler(std::move(f)); }

  /// Whether a connection is up now.
  bool connected() const { return core_.connections() != 0; }
  /// Connections made so far (each reconnection counts). A learner whose
  /// connection was replaced is a new peer to the syncer.
  std::uint64_t connects() const noexcept { return connects_.load(); }
  std::uint64_t receive_queue_bytes() const { return core_.receive_queue_bytes(); }
  const buffer_pool& pool() const noexcept { return core_.pool(); }

 private:
  using tcp = ::asio::ip::tcp;

  // All below run on the I/O thread.

  void connect() {
    if (core_.stopping()) return;
    std::error_code ec;
    const auto address = ::asio::ip::make_address(host_, ec);
    if (!ec) return attempt(std::vector<tcp::endpoint>{tcp::endpoint(address, port_)});
    resolver_.async_resolve(host_, std::to_string(port_),
                            [this](std::error_code e, const tcp::resolver::results_type& found) {
                              if (core_.stopping() || e == ::asio::error::operation_aborted) return;
                              if (e || found.empty()) return failed();
                              attempt(std::vector<tcp::endpoint>(found.begin(), found.end()));
                            });
  }

  void attempt(std::vector<tcp::endpoint> endpoints) {
    auto socket = std::make_shared<tcp::socket>(core_.context());
    attempt_ = socket;
    timer_.expires_after(core_.options().connect_timeout);
    timer_.async_wait([socket](std::error_code e) {
      std::error_code ignored;
      if (!e) socket->close(ignored);  // the attempt then fails with operation_aborted
    });
    ::asio::async_connect(*socket, endpoints, [this, socket](std::error_code e, const tcp::endpoint&) {
      timer_.cancel();
      attempt_.reset();
      if (core_.stopping()) return;
      if (e) return failed();
      delay_ = core_.options().reconnect_interval;
      ++connects_;
      core_.adopt(std::move(*socket), syncer_peer);
    });
  }

  void failed() {
    const auto wait = delay_;
    delay_ = std::min(delay_ * 2, core_.options().reconnect_interval_max);
    retry_after(wait);
  }

  void retry_after(std::chrono::milliseconds wait) {
    timer_.expires_after(wait);
    timer_.async_wait([this](std::error_code e) {
      if (!e && !core_.stopping()) connect();
    });
  }

  detail::io_core core_;
  std::string host_;
  std::uint16_t port_;
  tcp::resolver resolver_;
  ::asio::steady_timer timer_;  ///< the connect timeout, or the wait before the next attempt
  std::shared_ptr<tcp::socket> attempt_;
  std::chrono::milliseconds delay_;  ///< the wait after the next failed attempt
  std::atomic<std::uint64_t> connects_{0};
};

static_assert(blocking_transport<client>);

}  // namespace diloco::tcp
