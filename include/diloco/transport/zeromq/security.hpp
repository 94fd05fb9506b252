// What each end of diloco::zeromq needs to run CURVE: the syncer's key pair
// and allow-list, a learner's key pair and the syncer's public key.
#pragma once

#include <string>
#include <vector>

#include "diloco/transport/zeromq/allow_list.hpp"
#include "diloco/transport/zeromq/keys.hpp"

namespace diloco::zeromq {

/// The syncer's side of CURVE: its key pair and the learners it admits,
/// each key with the learner ids it may speak for.
struct server_security {
  curve_keypair keys;
  std::vector<allowed_key> allowed;
};

/// A learner's side of CURVE: its key pair and the syncer's public key.
struct client_security {
  curve_keypair keys;
  std::string server_key;
};

}  // namespace diloco::zeromq
