// An example trainer as syncer and learner processes over ZeroMQ: CURVE
// keys from the command line, and the refusal to serve another machine in
// the clear unless told to.
#pragma once

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include <diloco/transport/zeromq.hpp>
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

}  // namespace example_trainer
