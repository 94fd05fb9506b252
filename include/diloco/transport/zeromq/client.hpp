// diloco::zeromq::client, a learner's ZeroMQ endpoint (a DEALER socket), with
// optional CURVE.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/transport/zeromq/detail/receiving.hpp"
#include "diloco/transport/zeromq/detail/sending.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"
#include "diloco/transport/zeromq/options.hpp"
#include "diloco/transport/zeromq/security.hpp"

namespace diloco::zeromq {

/// A learner's endpoint: a DEALER socket connected to the syncer at
/// `endpoint`, with automatic reconnection. It sets no routing id: the
/// syncer's ROUTER names every connection, so a reconnection is a new peer
/// there. Without `ZMQ_IMMEDIATE`: with it, libzmq drops what a connection
/// still holds when the connection goes down — what the syncer sent just
/// before it closed (its answer to the leave) was lost in most tries on
/// loopback when the learner was waiting for it. Messages sent before the
/// connection is up wait for it, within the byte budget. A blocking
/// transport; use from one thread.
class client {
 public:
  /// `learner` and `incarnation` are not used: the learner's messages carry
  /// them, and the syncer's ROUTER names the connection itself.
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options = {})
      : options_(options), socket_(context, ::zmq::socket_type::dealer), inbox_(options_, memory_) {
    connect(endpoint, nullptr);
  }

  /// With CURVE: the connection is encrypted and authenticated with the
  /// learner's key pair against the syncer's public key.
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options, const client_security& security)
      : options_(options), socket_(context, ::zmq::socket_type::dealer), inbox_(options_, memory_) {
    connect(endpoint, &security);
  }

  /// With CURVE if `security` holds keys.
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options, const std::optional<client_security>& security)
      : options_(options), socket_(context, ::zmq::socket_type::dealer), inbox_(options_, memory_) {
    connect(endpoint, security ? &*security : nullptr);
  }

  ::zmq::socket_t& socket() noexcept { return socket_; }

  /// Sends to the syncer (`to` must be `syncer_peer`).
  std::error_code try_send(peer_id to, message& m) {
    if (to != syncer_peer) return errc::unknown_peer;
    return detail::send(socket_, nullptr, m, options_, queued_, memory_);
  }

  std::optional<envelope> try_receive() {
    return detail::receive(
        inbox_, socket_, false, [](const std::string&) { return syncer_peer; },
        [](const std::vector<::zmq::message_t>&) { return static_cast<const learner_ids*>(nullptr); });
  }

  /// Waits up to `timeout`, rounded up to a whole millisecond, for a
  /// message; returns as soon as one arrives.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    return detail::receive_within(
        timeout, [this] { return try_receive(); },
        [this](auto, std::chrono::nanoseconds left) {
          (void)detail::wait_readable(socket_, left);
          return true;
        });
  }

  /// Bytes (headers and payloads) sent and not yet written to the
  /// connection by libzmq.
  std::uint64_t queued_bytes() const noexcept { return queued_->load(std::memory_order_relaxed); }
  /// Bytes that unfinished inbound messages hold now (see `server`).
  std::uint64_t unfinished_bytes() const noexcept { return memory_->inbound.load(std::memory_order_relaxed); }

 private:
  void connect(const std::string& endpoint, const client_security* security) {
    detail::configure(socket_, options_);
    if (security) {
      socket_.set(::zmq::sockopt::curve_serverkey, security->server_key);
      socket_.set(::zmq::sockopt::curve_publickey, security->keys.public_key);
      socket_.set(::zmq::sockopt::curve_secretkey, security->keys.secret_key);
    }
    socket_.connect(endpoint);
  }

  socket_options options_;
  std::shared_ptr<diloco::detail::memory_use> memory_ = std::make_shared<diloco::detail::memory_use>();
  ::zmq::socket_t socket_;
  std::shared_ptr<detail::queued_bytes> queued_ = std::make_shared<detail::queued_bytes>(0);
  detail::inbox inbox_;
};

static_assert(blocking_transport<client>);

}  // namespace diloco::zeromq
