// diloco::zeromq::server, the syncer's ZeroMQ endpoint (a ROUTER socket), with
// optional CURVE; and `is_local_endpoint`, whether an endpoint can be bound
// without CURVE safely.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/transport/zeromq/detail/listener_watch.hpp"
#include "diloco/transport/zeromq/detail/receiving.hpp"
#include "diloco/transport/zeromq/detail/sending.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"
#include "diloco/transport/zeromq/options.hpp"
#include "diloco/transport/zeromq/security.hpp"
#include "diloco/transport/zeromq/zap_handler.hpp"

namespace diloco::zeromq {

/// The syncer's endpoint: a ROUTER socket bound to `endpoint`
/// (`tcp://127.0.0.1:0` picks a free port; see `endpoint()`), with
/// `ZMQ_ROUTER_MANDATORY` so that a send to a vanished learner fails with
/// `errc::unknown_peer` instead of disappearing. A blocking transport; use
/// from one thread.
///
/// Every connection is its own peer id, a learner's reconnection included:
/// the ROUTER names each connection itself, and a routing id that a peer
/// chooses is no identity (who a message speaks for is in its header, and
/// with CURVE its key must own that learner id). A peer may still announce
/// a routing id (`ZMQ_ROUTING_ID`); without `ZMQ_ROUTER_HANDOVER`, which this
/// socket leaves off, one already in use displaces nothing: libzmq 4.3 keeps
/// the newcomer's connection open but never reads it (its messages pile up
/// to the high-water mark, then TCP holds the rest), so it reaches no one.
///
/// With CURVE, each message is checked against the key its connection
/// authenticated with: a header naming a learner id that the key's
/// allow-list entry does not hold arrives as `wire_error::unauthorized`,
/// with the claimed header and without the payload.
///
/// On a tcp endpoint, a process out of descriptors (or memory) does not
/// make libzmq's I/O thread spin on the connections it cannot accept: they
/// are closed as soon as they arrive, from within `try_receive` and
/// `receive_for`, while established connections carry on (see
/// `detail::listener_watch`; the counts are `accept_failures`,
/// `connections_shed` and `listener_pauses`). Call one of the two regularly.
class server {
 public:
  /// With `security`, CURVE encrypts every connection, only learners whose
  /// public keys are allowed get through (a ZAP handler on `context`, of
  /// which there can be one per context), and each key speaks only for its
  /// learner ids.
  server(::zmq::context_t& context, const std::string& endpoint, socket_options options = {},
         std::optional<server_security> security = std::nullopt)
      : options_(options), socket_(context, ::zmq::socket_type::router), inbox_(options_, memory_) {
    detail::configure(socket_, options_);
    if (security) {
      zap_ = std::make_unique<zap_handler>(context, security->allowed);
      for (auto& a : security->allowed) learners_.push_back(std::move(a.learners));
      socket_.set(::zmq::sockopt::zap_domain, "diloco");
      socket_.set(::zmq::sockopt::curve_server, 1);
      socket_.set(::zmq::sockopt::curve_secretkey, security->keys.secret_key);
    }
    socket_.set(::zmq::sockopt::router_mandatory, 1);
    if (endpoint.rfind("tcp://", 0) == 0) watch_ = std::make_unique<detail::listener_watch>(context, socket_);
    socket_.bind(endpoint);
    if (watch_) watch_->attach();
    endpoint_ = socket_.get(::zmq::sockopt::last_endpoint);
  }

  /// The bound endpoint, with the port the system chose.
  const std::string& endpoint() const noexcept { return endpoint_; }
  ::zmq::socket_t& socket() noexcept { return socket_; }

  /// Connections admitted and refused by CURVE authentication (0 without it).
  std::uint64_t admitted() const noexcept { return zap_ ? zap_->admitted() : 0; }
  std::uint64_t denied() const noexcept { return zap_ ? zap_->denied() : 0; }

  /// Accepts that libzmq reported failed for want of descriptors or memory
  /// (each retry of a spinning listener counts; 0 off tcp).
  std::uint64_t accept_failures() const noexcept { return watch_ ? watch_->accept_failures() : 0; }
  /// Connections closed as soon as accepted because the process was out of
  /// descriptors.
  std::uint64_t connections_shed() const noexcept { return watch_ ? watch_->connections_shed() : 0; }
  /// Times the server let libzmq's I/O thread wait because shedding could
  /// not empty the queue of waiting connections.
  std::uint64_t listener_pauses() const noexcept { return watch_ ? watch_->listener_pauses() : 0; }

  /// `errc::queue_full` when `socket_options::queue_bytes` of this peer's
  /// messages are still queued, or when this peer has bytes queued and the
  /// message would take what the server holds past `memory_bytes` (see
  /// `detail::send`).
  std::error_code try_send(peer_id to, message& m) {
    if (to == 0 || to > peers_by_id_.size()) return errc::unknown_peer;
    const auto& p = peers_by_id_[to - 1];
    return detail::send(socket_, &p.routing_id, m, options_, p.queued, memory_);
  }

  std::optional<envelope> try_receive() {
    if (watch_) watch_->service(std::chrono::steady_clock::now());
    return detail::receive(
        inbox_, socket_, true, [this](const std::string& routing_id) { return peer_of(routing_id); },
        [this](const std::vector<::zmq::message_t>& frames) {
          return zap_ && !frames.empty() ? &learners_of(frames.front()) : nullptr;
        });
  }

  /// Bytes (headers and payloads) sent to `to` and not yet written to its
  /// connection.
  std::uint64_t queued_bytes(peer_id to) const noexcept {
    return to == 0 || to > peers_by_id_.size() ? 0 : peers_by_id_[to - 1].queued->load(std::memory_order_relaxed);
  }

  // The memory budget (`socket_options::memory_bytes`).

  /// Bytes sent to all peers together and not yet written.
  std::uint64_t queued_bytes() const noexcept { return memory_->outbound.load(std::memory_order_relaxed); }
  /// Bytes that unfinished inbound messages hold now: what has arrived of
  /// each (grown at most twofold) and 256 bytes of bookkeeping each.
  std::uint64_t unfinished_bytes() const noexcept { return memory_->inbound.load(std::memory_order_relaxed); }
  /// Unfinished inbound messages refused as `wire_error::over_budget`.
  std::uint64_t messages_evicted() const noexcept { return memory_->evicted.load(std::memory_order_relaxed); }
  /// `try_send`s refused with `errc::queue_full` because of the budget (not
  /// of the peer's own `queue_bytes`).
  std::uint64_t sends_over_budget() const noexcept { return memory_->sends_refused.load(std::memory_order_relaxed); }

  /// Waits up to `timeout`, rounded up to a whole millisecond, for a
  /// message; returns as soon as one arrives. Reads the listener watch's
  /// events meanwhile.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    using clock = std::chrono::steady_clock;
    return detail::receive_within(
        timeout, [this] { return try_receive(); },
        [this](clock::time_point now, std::chrono::nanoseconds left) {
          clock::duration wait = left;
          ::zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, 0, ZMQ_POLLIN, 0}};
          int watched = 1;
          if (watch_ && watch_->paused(now))
            wait = std::min<clock::duration>(wait, watch_->paused_until() - now);
          else if (watch_)
            items[watched++].socket = watch_->events().handle();
          try {
            (void)::zmq::poll(items, static_cast<std::size_t>(watched),
                              std::chrono::ceil<std::chrono::milliseconds>(wait));
          } catch (const ::zmq::error_t&) {
            return false;
          }
          return true;
        });
  }

 private:
  /// The ids the key behind `frame`'s connection may speak for: its
  /// allow-list entry, named by the User-Id our ZAP handler gave it.
  const learner_ids& learners_of(const ::zmq::message_t& frame) const {
    static const learner_ids nobody;
    const char* user = zmq_msg_gets(frame.handle(), "User-Id");
    if (!user) return nobody;
    const std::string_view text(user);
    std::size_t index = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || index >= learners_.size())
      return nobody;
    return learners_[index];
  }

  peer_id peer_of(const std::string& routing_id) {
    auto [it, fresh] = peers_.try_emplace(routing_id, static_cast<peer_id>(peers_by_id_.size() + 1));
    if (fresh) peers_by_id_.push_back({routing_id, std::make_shared<detail::queued_bytes>(0)});
    return it->second;
  }

  struct peer {
    std::string routing_id;
    std::shared_ptr<detail::queued_bytes> queued;  ///< shared with libzmq's release of what was sent
  };

  socket_options options_;
  /// Shared with libzmq's release of what was sent: outlives the socket.
  std::shared_ptr<diloco::detail::memory_use> memory_ = std::make_shared<diloco::detail::memory_use>();
  std::unique_ptr<zap_handler> zap_;   ///< before the socket: destroyed after it
  std::vector<learner_ids> learners_;  ///< by allow-list entry
  ::zmq::socket_t socket_;
  std::unique_ptr<detail::listener_watch> watch_;  ///< tcp only; after the socket: destroyed before it
  std::string endpoint_;
  std::unordered_map<std::string, peer_id> peers_;
  std::vector<peer> peers_by_id_;  ///< by peer id − 1
  detail::inbox inbox_;
};

static_assert(blocking_transport<server>);

/// Whether `endpoint` only reaches this machine (ipc, inproc, or tcp on a
/// loopback address). Services bind anything else only with CURVE or when
/// told to, so that an unauthenticated syncer is never exposed by accident.
inline bool is_local_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  for (const char* host : {"tcp://127.", "tcp://localhost:", "tcp://[::1]:"})
    if (endpoint.rfind(host, 0) == 0) return true;
  return false;
}

}  // namespace diloco::zeromq
