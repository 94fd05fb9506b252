// An example trainer as syncer and learner processes over ZeroMQ: CURVE
// keys from the command line, and the refusal to serve another machine in
// the clear unless told to.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>
#include <diloco/transport/zeromq/failover.hpp>
#include <example_trainer/settings.hpp>

namespace example_trainer {

/// The syncer's security: CURVE with `--curve-secret` (its key pair) and
/// `--curve-peer` (the learners' public keys); none on a loopback or ipc
/// endpoint, or with `--insecure`, saying so on stderr under `program`'s
/// name. Throws std::invalid_argument for a non-loopback endpoint without
/// keys or `--insecure`, and whatever loading the keys throws.
inline std::optional<diloco::zeromq::server_security> server_security_for(const run_settings& s,
                                                                          const std::string& program) {
  namespace zmq = diloco::zeromq;
  if (!s.curve_secret.empty())
    return zmq::server_security{zmq::load_keypair(s.curve_secret), zmq::load_allow_list(s.curve_peer)};
  const bool local = zmq::is_local_endpoint(s.endpoint);
  if (!local && !s.insecure)
    throw std::invalid_argument("refusing to serve " + s.endpoint +
                                " without CURVE keys (--curve-secret, --curve-peer); pass --insecure to do it anyway");
  std::fprintf(stderr, "%s syncer: no CURVE keys: %s\n", program.c_str(),
               local ? "serving this machine only" : "--insecure: anyone who reaches the endpoint can join");
  return std::nullopt;
}

/// A learner's security: CURVE with `--curve-secret` (its key pair) and
/// `--curve-peer` (the syncer's public key), or none.
inline std::optional<diloco::zeromq::client_security> client_security_for(const run_settings& s) {
  if (s.curve_secret.empty()) return std::nullopt;
  return diloco::zeromq::client_security{diloco::zeromq::load_keypair(s.curve_secret),
                                         diloco::zeromq::load_public_key(s.curve_peer)};
}

/// The parts of `list` between `separator`s (one part when there is none).
inline std::vector<std::string> split_at(const std::string& list, char separator) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (;;) {
    const auto at = list.find(separator, from);
    out.push_back(list.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) return out;
    from = at + 1;
  }
}

/// The endpoints of `--endpoint a,b,…`: one per syncer shard.
inline std::vector<std::string> split_endpoints(const std::string& list) { return split_at(list, ','); }

/// The candidates of one shard in `--endpoint`: `a|b|…`, its primary and
/// standbys (docs/protocol.md, "Failover").
inline std::vector<std::string> split_candidates(const std::string& shard) { return split_at(shard, '|'); }

/// A learner's connection to one syncer shard: to whichever of its
/// candidates leads.
using shard_link = diloco::zeromq::failover_client;
/// A learner process's connections to every shard, as one transport.
using shard_transport = diloco::sharded<shard_link>;

/// A learner's ZeroMQ connections to the syncer shards that `--endpoint`
/// lists (comma-separated; one for an unsharded syncer; `a|b` for a shard
/// with a standby: the learner moves to whichever leads), seen as one
/// transport: every shard, or, for rank `first` of a unit of `stride` ranks,
/// the shards s with s mod stride = first. Each socket lingers up to a
/// second when it closes, so the final contributions and the leave still go
/// out.
class shard_links {
 public:
  explicit shard_links(const run_settings& s, std::uint32_t first = 0, std::uint32_t stride = 1) {
    const auto endpoints = split_endpoints(s.endpoint);
    const auto security = client_security_for(s);
    diloco::zeromq::keep_large_blocks();  // large fragments arrive without page faults (process-wide)
    std::vector<shard_link*> connections;
    for (std::size_t shard = first; shard < endpoints.size(); shard += stride) {
      clients_.push_back(std::make_unique<shard_link>(context_, split_candidates(endpoints[shard]), s.learner_id,
                                                      s.incarnation, diloco::zeromq::socket_options{}, security));
      connections.push_back(clients_.back().get());
    }
    transport_.emplace(connections, static_cast<std::uint32_t>(endpoints.size()));
  }

  shard_transport& transport() noexcept { return *transport_; }

 private:
  ::zmq::context_t context_;
  std::vector<std::unique_ptr<shard_link>> clients_;
  std::optional<shard_transport> transport_;
};

}  // namespace example_trainer
