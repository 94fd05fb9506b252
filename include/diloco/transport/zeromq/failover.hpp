// diloco::zeromq::failover_client: a learner's connection to one syncer shard
// that runs as a primary with standbys (docs/protocol.md, "Failover").
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/transport/detail/duplicate.hpp"
#include "diloco/transport/zeromq/client.hpp"

namespace diloco::zeromq {

/// A connection to whichever of a shard's candidate endpoints (its primary
/// and standbys, in any order) leads it. Only the leader binds its endpoint.
///
/// - Probing: one `client` per candidate; every message goes to each of
///   them, and the first candidate a message arrives from is the leader:
///   the others are closed (what they still held is dropped).
/// - Connected: one `client`, to the leader. When its connection drops (a
///   killed leader's socket closes; libzmq's heartbeats end a paused one's
///   after `socket_options::heartbeat_timeout`), or it falls silent — a
///   join, contribution or leave sent, and nothing at all received for
///   `silence` since — the client probes again.
///
/// It starts probing (connected at once with one endpoint, which it never
/// leaves). `reconnections()` counts the leaders it left to probe again:
/// the learner then joins again at once (requirement 5 of `transport`), and
/// its join, sent to every candidate, is what the next leader answers — it
/// waits at an endpoint nobody binds yet for the standby that will (a
/// learner whose every fragment is in flight has nothing else to send). The epoch each leader stamps lets the learner
/// drop whatever a replaced one still sends. A blocking transport; use from one thread.
class failover_client {
 public:
  using clock = std::chrono::steady_clock;

  /// Throws `std::invalid_argument` for an empty list or a `silence` that
  /// is not positive.
  failover_client(::zmq::context_t& context, std::vector<std::string> endpoints, std::uint32_t learner,
                  std::uint32_t incarnation, socket_options options = {},
                  std::optional<client_security> security = std::nullopt,
                  std::chrono::nanoseconds silence = std::chrono::seconds(3))
      : context_(context),
        endpoints_(std::move(endpoints)),
        learner_(learner),
        incarnation_(incarnation),
        options_(options),
        security_(std::move(security)),
        silence_(silence),
        clients_(endpoints_.size()) {
    if (endpoints_.empty()) throw std::invalid_argument("diloco::zeromq::failover_client: no endpoint");
    if (silence_ <= std::chrono::nanoseconds::zero())
      throw std::invalid_argument("diloco::zeromq::failover_client: silence must be positive");
    if (endpoints_.size() == 1) {
      open(0);
      current_ = 0;
    } else {
      probe();
    }
  }

  ~failover_client() { unwatch(); }
  failover_client(const failover_client&) = delete;
  failover_client& operator=(const failover_client&) = delete;

  /// To the leader; while probing, a copy to every candidate.
  std::error_code try_send(peer_id to, message& m) {
    if (!awaiting_ && expects_answer(m.header.kind)) awaiting_ = clock::now();
    if (current_) return clients_[*current_]->try_send(to, m);
    bool any = false;
    for (std::size_t k = 0; k + 1 < clients_.size(); ++k) {
      message copy = diloco::detail::duplicate(m);
      any = !clients_[k]->try_send(to, copy) || any;
    }
    const auto last = clients_.back()->try_send(to, m);  // `m` stays whole if refused
    return any ? std::error_code() : last;
  }

  std::optional<envelope> try_receive() {
    if (current_) {
      auto e = clients_[*current_]->try_receive();
      if (e)
        awaiting_.reset();
      else if (silent() || dropped())
        probe();
      return e;
    }
    for (std::size_t k = 0; k < clients_.size(); ++k)
      if (auto e = clients_[k]->try_receive()) {
        settle(k);
        return e;
      }
    return std::nullopt;
  }

  /// Waits up to `timeout` for a message (probing: on each candidate in
  /// turn for at most 1 ms), probing again when the leader has been silent
  /// for too long meanwhile.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    const auto deadline = clock::now() + std::max(timeout, std::chrono::nanoseconds::zero());
    for (;;) {
      if (current_) {
        auto wait = deadline - clock::now();
        if (awaiting_ && endpoints_.size() > 1)
          wait = std::min<std::chrono::nanoseconds>(wait, *awaiting_ + silence_ - clock::now());
        if (monitor_) wait = std::min<std::chrono::nanoseconds>(wait, watch_period);
        if (auto e = clients_[*current_]->receive_for(std::max(wait, std::chrono::nanoseconds::zero()))) {
          awaiting_.reset();
          return e;
        }
        if (silent() || dropped()) probe();
      } else {
        for (std::size_t k = 0; k < clients_.size(); ++k) {
          const auto left = std::min<std::chrono::nanoseconds>(deadline - clock::now(), std::chrono::milliseconds(1));
          if (auto e = clients_[k]->receive_for(std::max(left, std::chrono::nanoseconds::zero()))) {
            settle(k);
            return e;
          }
        }
      }
      if (clock::now() >= deadline) return std::nullopt;
    }
  }

  /// The leader's endpoint (empty while probing).
  std::string endpoint() const { return current_ ? endpoints_[*current_] : std::string(); }
  bool probing() const noexcept { return !current_; }
  /// Leaders left (dropped or silent) to probe for the next one.
  std::uint64_t reconnections() const noexcept { return reconnections_; }

  std::uint64_t queued_bytes() const noexcept { return sum(&client::queued_bytes); }
  std::uint64_t unfinished_bytes() const noexcept { return sum(&client::unfinished_bytes); }

 private:
  static bool expects_answer(message_kind k) noexcept {
    return k == message_kind::join || k == message_kind::contribution || k == message_kind::leave;
  }

  bool silent() const { return endpoints_.size() > 1 && awaiting_ && clock::now() - *awaiting_ >= silence_; }

  /// How often a blocking wait looks at the leader's connection events.
  static constexpr std::chrono::milliseconds watch_period{50};

  /// Whether the leader's connection dropped since it was made (libzmq's
  /// socket monitor, ZMQ_EVENT_DISCONNECTED).
  bool dropped() {
    if (!monitor_) return false;
    ::zmq::message_t event, address;
    while (monitor_->recv(event, ::zmq::recv_flags::dontwait)) {
      if (event.more()) (void)monitor_->recv(address, ::zmq::recv_flags::dontwait);
      std::uint16_t id = 0;
      if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
      if (id == ZMQ_EVENT_DISCONNECTED) dropped_ = true;
    }
    return dropped_;
  }

  /// Watches the connection of candidate k, the leader now.
  void watch(std::size_t k) {
    unwatch();
    if (endpoints_.size() == 1) return;
    static std::atomic<std::uint64_t> monitors{0};
    const auto address = "inproc://diloco-failover-" + std::to_string(monitors.fetch_add(1));
    if (::zmq_socket_monitor(clients_[k]->socket().handle(), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) return;
    monitor_.emplace(context_, ::zmq::socket_type::pair);
    monitor_->set(::zmq::sockopt::linger, 0);
    monitor_->connect(address);
    watched_ = k;
    dropped_ = false;
  }

  void unwatch() {
    if (monitor_ && clients_[watched_]) (void)::zmq_socket_monitor(clients_[watched_]->socket().handle(), nullptr, 0);
    monitor_.reset();
    dropped_ = false;
  }

  /// Closes candidate k's client at once, dropping what it still holds: a
  /// copy lingering there would reach that candidate if it binds later (a
  /// standby that takes over), long after the learner moved on.
  void drop(std::size_t k) {
    if (!clients_[k]) return;
    clients_[k]->socket().set(::zmq::sockopt::linger, 0);
    clients_[k].reset();
  }

  void open(std::size_t k) {
    if (!clients_[k])
      clients_[k] = std::make_unique<client>(context_, endpoints_[k], learner_, incarnation_, options_, security_);
  }

  /// Connects to every candidate (the leader's connection is made anew: it
  /// may be a replaced one, paused, whose socket still accepts).
  void probe() {
    if (current_) ++reconnections_;  // a leader left: the learner joins again, and the next leader answers that
    awaiting_.reset();
    unwatch();
    if (current_) drop(*current_);
    current_.reset();
    for (std::size_t k = 0; k < clients_.size(); ++k) open(k);
  }

  /// Candidate k answered: it leads; the others are closed.
  void settle(std::size_t k) {
    awaiting_.reset();
    current_ = k;
    for (std::size_t j = 0; j < clients_.size(); ++j)
      if (j != k) drop(j);
    watch(k);
  }

  std::uint64_t sum(std::uint64_t (client::*counter)() const noexcept) const noexcept {
    std::uint64_t n = 0;
    for (const auto& c : clients_)
      if (c) n += (*c.*counter)();
    return n;
  }

  ::zmq::context_t& context_;
  std::vector<std::string> endpoints_;
  std::uint32_t learner_, incarnation_;
  socket_options options_;
  std::optional<client_security> security_;
  std::chrono::nanoseconds silence_;
  std::vector<std::unique_ptr<client>> clients_;  ///< per candidate; open while probing, the leader's after
  std::optional<std::size_t> current_;            ///< the leader, once one answered
  std::uint64_t reconnections_ = 0;
  std::optional<clock::time_point> awaiting_;  ///< since the first message expecting an answer went unanswered
  std::optional<::zmq::socket_t> monitor_;     ///< the leader's connection events
  std::size_t watched_ = 0;
  bool dropped_ = false;
};

static_assert(blocking_transport<failover_client> && requirements::transport::reconnections<failover_client>);

}  // namespace diloco::zeromq
