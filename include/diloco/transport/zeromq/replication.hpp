// The replication stream over ZeroMQ (docs/protocol.md, "Replication"): a
// primary syncer's `replication_source` (a ROUTER it binds while it leads)
// and a standby's `replication_follower` (a DEALER connected to the leader's
// source). One record per ZeroMQ message.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diloco/protocol/replication.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"

namespace diloco::zeromq {

/// How a primary waits for its standbys.
enum class replication_mode : std::uint8_t {
  /// A contribution is acknowledged once every standby following the
  /// primary has written it (and a checkpoint is complete once they have it):
  /// a failover to any of them loses nothing acknowledged. A standby that
  /// has not answered within `replication_options::timeout` is dropped (it
  /// follows again and catches up from a fresh snapshot); while no standby
  /// follows, the primary acknowledges alone.
  synchronous,
  /// Records leave without waiting: a failover loses what the primary
  /// acknowledged and had not yet sent, or sent and the standby had not yet
  /// written — at most what the link carries in flight.
  asynchronous,
};

struct replication_options {
  replication_mode mode = replication_mode::synchronous;
  std::chrono::milliseconds timeout{2000};                ///< a standby's longest wait for its acknowledgement
  std::uint64_t max_body_bytes = std::uint64_t{1} << 36;  ///< the largest record accepted (a snapshot)
  int linger_ms = 0;                                      ///< what a closed socket still sends
};

/// A primary's side of the stream. Everything it writes to its disk goes to
/// `snapshot` (a checkpoint, after the write) and `journal` (a contribution,
/// after its append): each standby that follows gets the newest snapshot and
/// the journal since, then every record as it comes. Use from the syncer's
/// thread; call `poll` now and then to take new followers.
class replication_source {
 public:
  /// Binds `endpoint`; `epoch` is the leadership it replicates; `log` gets
  /// a line when a standby follows or is dropped. Throws `zmq::error_t`
  /// when the endpoint cannot be bound.
  replication_source(::zmq::context_t& context, const std::string& endpoint, std::uint64_t epoch,
                     replication_options options = {}, std::function<void(const std::string&)> log = {})
      : socket_(context, ::zmq::socket_type::router), epoch_(epoch), options_(options), log_(std::move(log)) {
    socket_.set(::zmq::sockopt::router_mandatory, 1);
    socket_.set(::zmq::sockopt::router_handover, 1);  // a standby that follows again replaces its old connection
    socket_.set(::zmq::sockopt::sndhwm, 1000);
    socket_.set(::zmq::sockopt::linger, options_.linger_ms);
    socket_.set(::zmq::sockopt::maxmsgsize,
                static_cast<std::int64_t>(replication_record::header_bytes + max_name_bytes));
    socket_.bind(endpoint);
    endpoint_ = socket_.get(::zmq::sockopt::last_endpoint);
  }

  /// The bound endpoint (with the port chosen when `endpoint` asked for any).
  const std::string& endpoint() const noexcept { return endpoint_; }
  std::size_t followers() const noexcept { return followers_.size(); }
  /// Records sent and acknowledged, standbys dropped.
  std::uint64_t sequence() const noexcept { return sequence_; }
  std::uint64_t dropped() const noexcept { return dropped_; }

  /// The longest name a standby follows under.
  static constexpr std::size_t max_name_bytes = 200;

  /// A checkpoint body was written: it replaces the journal.
  void snapshot(std::string body) {
    snapshot_ = std::make_shared<const std::string>(
        replication_record{replication_kind::snapshot, epoch_, ++sequence_, std::move(body)}.encode());
    journal_.clear();
    send_to_all(snapshot_);
  }

  /// A contribution was journaled.
  void journal(const message& m) {
    journal_.push_back(std::make_shared<const std::string>(replication_record::encode_journal(m, epoch_, ++sequence_)));
    send_to_all(journal_.back());
  }

  /// Takes the follows and acknowledgements that arrived; a new follower
  /// gets the newest snapshot and the journal since, if there is one yet.
  void poll() {
    while (auto r = receive(std::chrono::milliseconds(0))) handle(std::move(*r));
  }

 private:
  struct follower {
    std::string name;
    std::uint64_t acked = 0;
    bool caught_up = false;  ///< has been sent the snapshot and journal
  };
  struct received {
    std::string peer;
    replication_record record;
  };

  std::optional<received> receive(std::chrono::milliseconds timeout) {
    if (!detail::wait_readable(socket_, timeout)) return std::nullopt;
    for (;;) {
      ::zmq::message_t peer, body;
      if (!socket_.recv(peer, ::zmq::recv_flags::dontwait)) return std::nullopt;
      if (!peer.more() || !socket_.recv(body, ::zmq::recv_flags::dontwait)) continue;
      while (body.more()) (void)socket_.recv(body, ::zmq::recv_flags::dontwait);  // never more than two parts
      try {
        return received{peer.to_string(), replication_record::decode(body.to_string_view(), max_name_bytes)};
      } catch (const corrupt_state& e) {
        say(std::string("refused a message from a standby: ") + e.what());
      }
    }
  }

  void handle(received r) {
    if (r.record.kind == replication_kind::follow) {
      auto& f = followers_[r.peer];
      f = follower{r.record.body, 0, false};
      say("standby " + f.name + " follows");
      if (!catch_up(r.peer, f)) drop(r.peer, "cannot be sent to");
    } else if (r.record.kind == replication_kind::ack && r.record.epoch == epoch_) {
      if (auto it = followers_.find(r.peer); it != followers_.end())
        it->second.acked = std::max(it->second.acked, std::min(r.record.sequence, sequence_));
    }
  }

  /// Sends `f` the snapshot and the journal since; false if it cannot be reached.
  bool catch_up(const std::string& peer, follower& f) {
    if (!snapshot_) return true;  // nothing written yet: it gets the first snapshot with everybody
    bool ok = send(peer, snapshot_);
    for (std::size_t k = 0; ok && k < journal_.size(); ++k) ok = send(peer, journal_[k]);
    f.caught_up = ok;
    return ok;
  }

  /// Sends `record`, numbered `sequence_`, to every follower.
  void send_to_all(const std::shared_ptr<const std::string>& record) {
    std::vector<std::string> unreachable;
    for (auto& [peer, f] : followers_) {
      // A follow that came before the first snapshot gets it now.
      const bool ok = f.caught_up ? send(peer, record) : catch_up(peer, f);
      if (!ok) unreachable.push_back(peer);
    }
    for (const auto& peer : unreachable) drop(peer, "cannot be sent to");
    if (options_.mode == replication_mode::synchronous) wait_for_acks();
  }

  /// Until every follower has acknowledged `sequence_`, or its time is up.
  void wait_for_acks() {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    for (;;) {
      const bool all =
          std::all_of(followers_.begin(), followers_.end(), [&](const auto& f) { return f.second.acked >= sequence_; });
      if (all) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      if (auto r = receive(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                           std::chrono::milliseconds(1)))
        handle(std::move(*r));
    }
    std::vector<std::string> late;
    for (const auto& [peer, f] : followers_)
      if (f.acked < sequence_) late.push_back(peer);
    for (const auto& peer : late) drop(peer, "did not acknowledge within the replication timeout:");
  }

  /// Sends an encoded record without copying it: libzmq holds a reference
  /// until the bytes are written.
  bool send(const std::string& peer, const std::shared_ptr<const std::string>& record) {
    auto* held = new std::shared_ptr<const std::string>(record);
    ::zmq::message_t part(
        const_cast<char*>(record->data()), record->size(),
        [](void*, void* hint) { delete static_cast<std::shared_ptr<const std::string>*>(hint); }, held);
    try {
      return socket_.send(::zmq::buffer(peer), ::zmq::send_flags::sndmore | ::zmq::send_flags::dontwait) &&
             socket_.send(part, ::zmq::send_flags::dontwait);
    } catch (const ::zmq::error_t&) {
      return false;  // EHOSTUNREACH: gone
    }
  }

  bool send(const std::string& peer, replication_kind kind) {
    return send(peer, std::make_shared<const std::string>(replication_record{kind, epoch_, sequence_, {}}.encode()));
  }

  void drop(const std::string& peer, const std::string& why) {
    auto it = followers_.find(peer);
    if (it == followers_.end()) return;
    say("standby " + it->second.name + " " + why + " dropped; it follows again from a snapshot");
    (void)send(peer, replication_kind::dropped);
    followers_.erase(it);
    ++dropped_;
  }

  void say(const std::string& line) {
    if (log_) log_("replication: " + line);
  }

  ::zmq::socket_t socket_;
  std::string endpoint_;
  std::uint64_t epoch_;
  replication_options options_;
  std::function<void(const std::string&)> log_;
  std::map<std::string, follower> followers_;
  std::shared_ptr<const std::string> snapshot_;              ///< the newest, encoded
  std::vector<std::shared_ptr<const std::string>> journal_;  ///< encoded, since the snapshot
  std::uint64_t sequence_ = 0, dropped_ = 0;
};

/// A standby's side of the stream: follows the leader's source and writes
/// what it sends into a `Replica` (`diloco::replica`, runtime/replication.hpp:
/// `follow(epoch)`, `epoch()`, and `apply(record view)` returning the
/// sequence to acknowledge or throwing `corrupt_state`), acknowledging each
/// record once written.
template <class Replica>
class replication_follower {
 public:
  /// `name` tells the primary who follows: its routing id and what its logs
  /// say (1 to `replication_source::max_name_bytes` bytes; throws
  /// `std::invalid_argument` otherwise).
  replication_follower(::zmq::context_t& context, Replica& copy, std::string name, replication_options options = {},
                       std::function<void(const std::string&)> log = {})
      : context_(context), copy_(copy), name_(std::move(name)), options_(options), log_(std::move(log)) {
    if (name_.empty() || name_.size() > replication_source::max_name_bytes || name_.front() == '\0')
      throw std::invalid_argument(
          "diloco::zeromq::replication_follower: a name of 1 to 200 bytes, not starting with 0");
  }

  /// Follows the source at `endpoint` of leadership `epoch` (again, from a
  /// snapshot, when either changes or after `restart`).
  void follow(const std::string& endpoint, std::uint64_t epoch) {
    if (socket_ && endpoint == endpoint_ && epoch == copy_.epoch()) return;
    endpoint_ = endpoint;
    copy_.follow(epoch);
    socket_.emplace(context_, ::zmq::socket_type::dealer);
    socket_->set(::zmq::sockopt::routing_id, name_);  // the primary's ROUTER hands its entry over
    socket_->set(::zmq::sockopt::linger, options_.linger_ms);
    socket_->set(::zmq::sockopt::maxmsgsize,
                 static_cast<std::int64_t>(options_.max_body_bytes + replication_record::header_bytes));
    socket_->set(::zmq::sockopt::rcvhwm, 0);
    socket_->connect(endpoint);
    send(replication_kind::follow, 0, name_);
    say("following " + endpoint + " (epoch " + std::to_string(epoch) + ")");
  }

  /// Stops following (the standby leads now, or nobody does).
  void stop() noexcept {
    socket_.reset();
    endpoint_.clear();
  }

  /// Writes and acknowledges what arrives within `timeout`.
  void pump_for(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (socket_) {
      const auto now = std::chrono::steady_clock::now();
      if (!detail::wait_readable(*socket_, now < deadline ? deadline - now : std::chrono::nanoseconds(0))) return;
      ::zmq::message_t part;
      while (socket_ && socket_->recv(part, ::zmq::recv_flags::dontwait)) {
        if (part.more()) continue;  // a DEALER gets one part per record
        take(part.to_string_view());
      }
      if (std::chrono::steady_clock::now() >= deadline) return;
    }
  }

 private:
  void take(std::string_view bytes) {
    try {
      const auto r = replication_record::decode_view(bytes, options_.max_body_bytes);
      if (r.kind == replication_kind::dropped && r.epoch == copy_.epoch()) return restart("the primary dropped it");
      send(replication_kind::ack, copy_.apply(r), {});
    } catch (const corrupt_state& e) {
      restart(e.what());  // nothing written; a fresh snapshot puts it right
    }
  }

  void restart(const std::string& why) {
    say(why + "; following again");
    const auto endpoint = endpoint_;
    const auto epoch = copy_.epoch();
    stop();
    follow(endpoint, epoch);
  }

  void send(replication_kind kind, std::uint64_t sequence, std::string body) {
    const auto bytes = replication_record{kind, copy_.epoch(), sequence, std::move(body)}.encode();
    (void)socket_->send(::zmq::buffer(bytes), ::zmq::send_flags::dontwait);
  }

  void say(const std::string& line) {
    if (log_) log_("replication: " + line);
  }

  ::zmq::context_t& context_;
  Replica& copy_;
  std::string name_;
  replication_options options_;
  std::function<void(const std::string&)> log_;
  std::optional<::zmq::socket_t> socket_;
  std::string endpoint_;
};

}  // namespace diloco::zeromq
