// The TCP transport on standalone Asio, namespace diloco::tcp (CMake target
// diloco::tcp; needs only Asio's headers, no Boost): the syncer's `server`
// (tcp/server.hpp) accepts connections, each learner's `client`
// (tcp/client.hpp) connects to it and reconnects by itself, both set up with
// `socket_options` (tcp/options.hpp). Each direction of a connection is a
// stream of 144-byte headers, each followed by the payload it announces
// (docs/protocol.md, "Framing", TCP). `serve` (tcp/serve.hpp) drives a syncer
// on a `server` with Asio timers, sleeping until a message or a deadline.
#pragma once

#include "diloco/transport/tcp/client.hpp"
#include "diloco/transport/tcp/options.hpp"
#include "diloco/transport/tcp/serve.hpp"
#include "diloco/transport/tcp/server.hpp"
