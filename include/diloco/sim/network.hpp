// A simulated network with a virtual clock: per-link latency, bandwidth,
// jitter and seeded loss, so a multi-learner run is deterministic and
// reproducible in a unit test. `sim::run` (sim/run.hpp) drives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/random.hpp"

namespace diloco::sim {

using clock = std::chrono::steady_clock;
using time_point = clock::time_point;

/// One direction of a link.
struct link_options {
  std::chrono::nanoseconds latency{0};  ///< one-way propagation delay
  double bytes_per_second = 0.0;        ///< serialization rate; 0 means unlimited
  std::chrono::nanoseconds jitter{0};   ///< extra delay, uniform in [0, jitter); may reorder
  double loss = 0.0;                    ///< probability that a message is dropped
};

/// Bytes a message occupies on a simulated link: its payload plus a fixed
/// header allowance.
inline constexpr std::size_t header_bytes = 128;

class network;

/// An endpoint of the simulated network. Messages become visible to
/// `try_receive` once the virtual clock reaches their delivery time.
class endpoint {
 public:
  peer_id id() const noexcept { return id_; }
  std::error_code try_send(peer_id to, message& m);
  std::optional<envelope> try_receive();

  /// When the earliest message not yet received arrives (it may already have).
  std::optional<time_point> next_arrival() const {
    if (inbox_.empty()) return std::nullopt;
    return inbox_.top().at;
  }

 private:
  friend class network;
  endpoint(network& net, peer_id id) : net_(&net), id_(id) {}

  struct pending {
    time_point at;
    std::uint64_t order;
    envelope env;
  };
  struct later {
    bool operator()(const pending& a, const pending& b) const { return a.at != b.at ? a.at > b.at : a.order > b.order; }
  };

  network* net_;
  peer_id id_;
  std::priority_queue<pending, std::vector<pending>, later> inbox_;
};

/// Counters of what the network did.
struct network_stats {
  std::uint64_t sent = 0;
  std::uint64_t delivered = 0;
  std::uint64_t lost = 0;
  std::uint64_t bytes = 0;
};

/// The virtual clock, the links and the endpoints. Single-threaded.
class network {
 public:
  explicit network(std::uint64_t seed, link_options default_link = {}) : rng_(seed), default_link_(default_link) {}
  network(const network&) = delete;
  network& operator=(const network&) = delete;

  /// The endpoint for `id`; throws `std::invalid_argument` if `id` is taken.
  endpoint& attach(peer_id id) {
    auto [it, inserted] = endpoints_.try_emplace(id, nullptr);
    if (!inserted)
      throw std::invalid_argument("diloco::sim::network: peer " + std::to_string(id) + " is already attached");
    it->second.reset(new endpoint(*this, id));
    return *it->second;
  }

  /// Sets the link from `from` to `to` (one direction).
  void set_link(peer_id from, peer_id to, link_options options) { links_[{from, to}].options = options; }

  time_point now() const noexcept { return now_; }

  /// Moves the clock forward; never backwards.
  void advance_to(time_point t) {
    if (t > now_) now_ = t;
  }

  const network_stats& stats() const noexcept { return stats_; }

 private:
  friend class endpoint;

  struct link_state {
    link_options options;
    time_point busy_until{};
  };

  std::error_code send(peer_id from, peer_id to, message& m) {
    auto dest = endpoints_.find(to);
    if (dest == endpoints_.end()) return errc::unknown_peer;
    auto [it, inserted] = links_.try_emplace({from, to});
    if (inserted) it->second.options = default_link_;
    auto& link = it->second;
    const std::size_t bytes = m.payload.size() + header_bytes;
    ++stats_.sent;
    stats_.bytes += bytes;
    // The sender's link is busy while the message is serialized, lost or not.
    const time_point depart = std::max(now_, link.busy_until);
    std::chrono::nanoseconds serialize{0};
    if (link.options.bytes_per_second > 0)
      serialize =
          std::chrono::nanoseconds(static_cast<std::int64_t>(1e9 * double(bytes) / link.options.bytes_per_second));
    link.busy_until = depart + serialize;
    if (link.options.loss > 0 && rng_.uniform() < link.options.loss) {
      ++stats_.lost;
      message dropped = std::move(m);
      return {};
    }
    std::chrono::nanoseconds extra{0};
    if (link.options.jitter.count() > 0)
      extra = std::chrono::nanoseconds(static_cast<std::int64_t>(rng_.uniform() * double(link.options.jitter.count())));
    const time_point at = link.busy_until + link.options.latency + extra;
    dest->second->inbox_.push({at, order_++, envelope{from, std::move(m)}});
    return {};
  }

  splitmix64 rng_;
  link_options default_link_;
  time_point now_{};
  std::uint64_t order_ = 0;
  std::map<peer_id, std::unique_ptr<endpoint>> endpoints_;
  std::map<std::pair<peer_id, peer_id>, link_state> links_;
  network_stats stats_;
};

inline std::error_code endpoint::try_send(peer_id to, message& m) { return net_->send(id_, to, m); }

inline std::optional<envelope> endpoint::try_receive() {
  if (inbox_.empty() || inbox_.top().at > net_->now()) return std::nullopt;
  // priority_queue::top is const; the element is discarded right after the move.
  envelope e = std::move(const_cast<pending&>(inbox_.top()).env);
  inbox_.pop();
  ++net_->stats_.delivered;
  return e;
}

static_assert(transport<endpoint>);

}  // namespace diloco::sim
