// Leadership of one syncer shard, held in etcd the way Patroni holds a
// PostgreSQL cluster's leader key: a key created under a lease that its
// holder keeps alive. Whoever creates the key leads until the lease expires
// or is revoked; the standby creates it next. The key's create revision is
// the leadership's epoch: etcd's revisions only grow, so every new leader
// has a larger epoch than every earlier one, and a message stamped with an
// older epoch comes from a leader that has been replaced (docs/protocol.md,
// "Epochs").
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/coordination/etcd.hpp"

namespace diloco::etcd {

/// How a `leader_lease` holds its key.
struct lease_options {
  /// The lease's time to live: how long the key outlives a leader that
  /// stopped renewing it (killed, paused, cut off), hence the failover time.
  /// etcd rounds it up to its minimum (about 2 s with default settings).
  std::chrono::seconds ttl{5};
  /// The leader renews the lease every `ttl · renew_share` (and then
  /// knows it holds it for a whole TTL from the renewal's start on).
  double renew_share = 1.0 / 3;
  /// The leader counts on its lease for `ttl · trusted_share` after the
  /// start of the last renewal etcd granted, less than the whole TTL, so
  /// that a leader whose clock runs a little slow, or whose renewal waited
  /// in etcd, stops publishing before etcd lets the key go.
  double trusted_share = 0.8;
};

/// One candidate for, or holder of, the leadership key `key`: a syncer
/// shard's primary or standby. Not thread-safe: one thread (the syncer's)
/// calls it. Every call to etcd is bounded by the client's timeout.
///
/// A leader calls `renew(now)` from its loop and publishes (welcomes,
/// updates) only while `held(now)`. A leader that cannot reach etcd keeps
/// publishing until its trusted share of the TTL runs out, then stops; one
/// whose renewal finds the lease gone (it expired while the process was
/// stopped or cut off, and a standby may have taken over) has lost it for
/// good: `lost()`, and it must step down.
class leader_lease {
 public:
  /// `name` is what the key holds: who leads (an endpoint, say). Throws
  /// `std::invalid_argument` for an empty key or name, or shares outside
  /// (0, 1].
  leader_lease(client& etcd, std::string key, std::string name, lease_options options = {})
      : etcd_(etcd), key_(std::move(key)), name_(std::move(name)), options_(options) {
    if (key_.empty() || name_.empty()) throw std::invalid_argument("diloco::etcd::leader_lease: empty key or name");
    const auto share = [](double s) { return s > 0 && s <= 1; };
    if (!share(options_.renew_share) || !share(options_.trusted_share) || options_.ttl.count() < 1)
      throw std::invalid_argument("diloco::etcd::leader_lease: the TTL must be at least 1 s and the shares in (0, 1]");
  }
  leader_lease(const leader_lease&) = delete;
  leader_lease& operator=(const leader_lease&) = delete;

  /// One attempt at the leadership at `now`: unless someone holds the key,
  /// creates it under a new lease. Returns whether this candidate leads now
  /// (then `epoch()` is the new epoch). A candidate that leads already, or
  /// that lost for good, does nothing and returns `held(now)`. Throws
  /// `error` when etcd cannot be reached or refuses.
  bool campaign(time_point now) {
    if (epoch_ != 0 || lost_) return held(now);
    const std::int64_t lease = etcd_.grant(options_.ttl);
    auto [created, kv] = etcd_.create(key_, name_, lease);
    if (!created) {
      etcd_.revoke(lease);
      holder_ = std::move(kv);
      return false;
    }
    lease_ = lease, epoch_ = static_cast<std::uint64_t>(kv.create_revision), holder_ = std::move(kv);
    trust_from(now, options_.ttl);
    last_renewal_ = now;
    return true;
  }

  /// A leader's upkeep at `now`: renews the lease when `ttl · renew_share`
  /// has passed since the last renewal. Returns `held(now)` afterwards.
  /// Never throws: a renewal that fails (etcd unreachable) is tried again
  /// at the next call, and `last_error()` says why it failed.
  bool renew(time_point now) {
    if (epoch_ == 0 || lost_) return false;
    if (now - last_renewal_ < std::chrono::duration<double>(options_.ttl) * options_.renew_share) return held(now);
    last_renewal_ = now;
    try {
      const auto ttl = etcd_.keep_alive(lease_);
      last_error_.clear();
      if (ttl.count() <= 0)
        lost_ = true, last_error_ = "the lease expired: another syncer may lead (epoch " + std::to_string(epoch_) + ")";
      else
        trust_from(now, ttl);
    } catch (const error& e) {
      last_error_ = e.what();
    }
    return held(now);
  }

  /// Whether this candidate surely leads at `now`: it won, has not lost
  /// for good, and its last granted renewal still covers `now`.
  bool held(time_point now) const noexcept { return epoch_ != 0 && !lost_ && now < trusted_until_; }

  /// The lease expired or was revoked under this leader: it never leads
  /// again (a new candidate, with a new lease, may).
  bool lost() const noexcept { return lost_; }

  /// The epoch this candidate won (the key's create revision), or 0.
  std::uint64_t epoch() const noexcept { return epoch_; }

  /// The key as the last campaign found it (its holder's name and epoch).
  const std::optional<key_value>& holder() const noexcept { return holder_; }

  /// Why the last renewal failed; empty when it did not.
  const std::string& last_error() const noexcept { return last_error_; }

  /// Steps down: revokes the lease, so that the key goes at once and a
  /// standby can lead without waiting for the TTL. Best effort (the lease
  /// expires anyway); this candidate never leads again.
  void resign() noexcept {
    if (epoch_ == 0 || lost_) return;
    lost_ = true;
    try {
      etcd_.revoke(lease_);
    } catch (const error&) {
    }
  }

 private:
  void trust_from(time_point start, std::chrono::seconds ttl) {
    trusted_until_ = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(ttl) *
                                                                         options_.trusted_share);
  }

  client& etcd_;
  std::string key_, name_;
  lease_options options_;
  std::int64_t lease_ = 0;
  std::uint64_t epoch_ = 0;
  bool lost_ = false;
  time_point trusted_until_{}, last_renewal_{};
  std::optional<key_value> holder_;
  std::string last_error_;
};

}  // namespace diloco::etcd
