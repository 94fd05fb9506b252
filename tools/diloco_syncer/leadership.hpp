// diloco_syncer --etcd: the shard's leadership held under a lease in etcd
// (diloco::etcd::leader_lease). The process waits as a standby while another
// syncer leads, leads with the epoch it won, and exits with status 4 the
// moment it cannot be sure it still leads: nothing more may leave it, since
// a standby may lead by then (docs/protocol.md, "Epochs").
//
// Compiled apart (leadership.cpp): diloco::etcd is built on Boost.Asio, which
// cannot share a translation unit with the standalone Asio of the metrics
// server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

namespace diloco_syncer {

/// The exit status of a syncer that stepped down.
inline constexpr int stepped_down_status = 4;

/// Who leads a shard: what its leadership key holds, and the epoch.
struct leader {
  std::string endpoint;     ///< where learners reach it
  std::string replication;  ///< where it serves its replication stream (empty: none)
  std::uint64_t epoch = 0;
};

class leadership {
 public:
  /// `etcd` is http://HOST:PORT, `key` the shard's leadership key, `self`
  /// this syncer's endpoints (what the key holds while it leads, as JSON
  /// {"endpoint", "replication"}); `log` writes a line. Requests to etcd wait
  /// at most a quarter of the TTL (at most 2 s). Throws
  /// `std::invalid_argument` for a URL that is not http://HOST:PORT.
  leadership(const std::string& etcd, std::string key, const leader& self, std::uint32_t ttl_seconds,
             std::function<void(const std::string&)> log);
  ~leadership();
  leadership(const leadership&) = delete;
  leadership& operator=(const leadership&) = delete;

  /// What a standby does between two campaigns: `wait(who, period)`, with
  /// the leader (null while unknown), returns after about `period`.
  using standby_wait = std::function<void(const leader* who, std::chrono::milliseconds period)>;

  /// Campaigns every quarter of the TTL until this syncer leads or `stop`
  /// is requested, calling `wait` in between; says who leads meanwhile (once
  /// per leadership). Returns whether it leads. etcd out of reach is said
  /// and tried again.
  bool acquire(std::stop_token stop, const standby_wait& wait);

  /// Gives the leadership up at once (a clean exit: the standby need not
  /// wait for the lease to end).
  void resign() noexcept;

  /// The epoch it leads with (0 before).
  std::uint64_t epoch() const noexcept;

  /// Renews the lease when due; if this syncer cannot be sure it still
  /// leads, it says why on stderr and exits at once with status 4, before
  /// anything more leaves it (no acknowledgement, update or checkpoint).
  void keep();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace diloco_syncer
