// A transport decorator that injects network faults on a seeded schedule:
// drops, delays, duplicates, reorders, corrupts and partitions. Deterministic
// on the simulated network (its clock, one seed); works on any transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/random.hpp"

namespace diloco::chaos {

/// A time window during which no message passes, in either direction.
struct window {
  time_point from{};
  time_point until{};
};

/// What goes wrong, per received message (probabilities in [0, 1]).
struct fault_plan {
  double drop = 0.0;       ///< the message disappears
  double duplicate = 0.0;  ///< it arrives twice
  double corrupt =
      0.0;  ///< it arrives damaged: an envelope with `wire_error::bad_checksum`, as a checksummed wire delivers it
  double delay = 0.0;  ///< it arrives up to `max_delay` late
  std::chrono::nanoseconds max_delay{0};
  double reorder = 0.0;  ///< it is held back for `max_hold`, so that other senders' messages overtake it
  std::chrono::nanoseconds max_hold{std::chrono::milliseconds(50)};
  std::vector<window> partitions;
  std::uint64_t seed = 1;
};

/// What the decorator did.
struct fault_counts {
  std::uint64_t passed = 0, dropped = 0, duplicated = 0, corrupted = 0, delayed = 0, reordered = 0, partitioned = 0;
};

/// Wraps an endpoint `Inner` (held by reference). Faults apply to what this
/// endpoint receives; partitions also swallow what it sends. Messages of one
/// sender keep their order — every diloco network transport is FIFO per
/// connection — so delays and holds reorder messages across senders, and a
/// held message holds back its sender's later ones. Decisions draw from one
/// seeded generator in arrival order and times come from `clock`, so on the
/// simulated network (clock = `network::now`) a run is reproducible. A
/// transport, and a blocking one if `Inner` is.
template <class Inner>
class faulty {
  static_assert(check_transport<Inner>());

 public:
  faulty(Inner& inner, fault_plan plan, std::function<time_point()> clock)
      : inner_(inner), plan_(std::move(plan)), clock_(std::move(clock)), rng_(plan_.seed) {}

  /// Passes the message on, unless a partition is in force: then it is lost
  /// (and the send "succeeds", as on a real network).
  std::error_code try_send(peer_id to, message& m) {
    if (partitioned(clock_())) {
      ++counts_.partitioned;
      message lost = std::move(m);
      return {};
    }
    return inner_.try_send(to, m);
  }

  std::optional<envelope> try_receive() {
    while (auto e = inner_.try_receive()) ingest(std::move(*e));
    return release();
  }

  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) requires blocking_transport<Inner> {
    const time_point deadline = clock_() + timeout;
    for (;;) {
      if (auto e = try_receive()) return e;
      const time_point now = clock_();
      if (now >= deadline) return std::nullopt;
      auto wait = deadline - now;
      if (!ready_.empty()) wait = std::min<std::chrono::nanoseconds>(wait, ready_.front().at - now);
      if (auto e = inner_.receive_for(std::max<std::chrono::nanoseconds>(wait, std::chrono::nanoseconds(1))))
        ingest(std::move(*e));
    }
  }

  /// When the next message becomes available (for the simulator).
  std::optional<time_point> next_arrival() const requires requirements::transport::next_arrival<Inner> {
    auto t = inner_.next_arrival();
    if (!ready_.empty() && (!t || ready_.front().at < *t)) t = ready_.front().at;
    return t;
  }

  const fault_counts& counts() const noexcept { return counts_; }
  Inner& inner() noexcept { return inner_; }

 private:
  struct held {
    time_point at;
    std::uint64_t order;
    envelope env;
  };

  bool partitioned(time_point t) const {
    for (const auto& w : plan_.partitions)
      if (t >= w.from && t < w.until) return true;
    return false;
  }

  static envelope copy(const envelope& e) {
    envelope c;
    c.from = e.from;
    c.error = e.error;
    c.msg.header = e.msg.header;
    if (!e.msg.payload.empty()) {
      c.msg.payload = byte_buffer(e.msg.payload.size());
      std::memcpy(c.msg.payload.data(), e.msg.payload.data(), e.msg.payload.size());
    }
    return c;
  }

  /// Queues `e` for release at `at`, but never before its sender's previous
  /// message (FIFO per sender).
  void push(envelope&& e, time_point at) {
    auto& last = last_release_[e.from];
    at = std::max(at, last);
    last = at;
    held h{at, order_++, std::move(e)};
    auto it = ready_.begin();
    while (it != ready_.end() && (it->at < h.at || (it->at == h.at && it->order < h.order))) ++it;
    ready_.insert(it, std::move(h));
  }

  /// Decides the fate of one arriving message. The draws happen in a fixed
  /// order whatever the outcome, so one decision never shifts the others.
  void ingest(envelope&& e) {
    const time_point now = clock_();
    const double u_drop = rng_.uniform(), u_dup = rng_.uniform(), u_corrupt = rng_.uniform(), u_delay = rng_.uniform(),
                 delay_fraction = rng_.uniform(), u_reorder = rng_.uniform();
    if (partitioned(now)) return void(++counts_.partitioned);
    if (u_drop < plan_.drop) return void(++counts_.dropped);
    if (u_corrupt < plan_.corrupt) {
      ++counts_.corrupted;
      envelope damaged;
      damaged.from = e.from;
      damaged.error = wire_error::bad_checksum;
      e = std::move(damaged);
    }
    time_point at = now;
    if (u_delay < plan_.delay && plan_.max_delay.count() > 0) {
      ++counts_.delayed;
      at += std::chrono::nanoseconds(1 + static_cast<std::int64_t>(delay_fraction * double(plan_.max_delay.count())));
    }
    if (u_reorder < plan_.reorder) {
      ++counts_.reordered;
      at += plan_.max_hold;
    }
    ++counts_.passed;
    const bool twice = u_dup < plan_.duplicate;
    if (twice) ++counts_.duplicated;
    envelope second = twice ? copy(e) : envelope{};
    push(std::move(e), at);
    if (twice) push(std::move(second), at);
  }

  std::optional<envelope> release() {
    if (ready_.empty() || ready_.front().at > clock_()) return std::nullopt;
    envelope e = std::move(ready_.front().env);
    ready_.pop_front();
    return e;
  }

  Inner& inner_;
  fault_plan plan_;
  std::function<time_point()> clock_;
  splitmix64 rng_;
  std::deque<held> ready_;  ///< by release time, then arrival order
  std::map<peer_id, time_point> last_release_;
  std::uint64_t order_ = 0;
  fault_counts counts_;
};

}  // namespace diloco::chaos
