// The ZeroMQ transport, namespace diloco::zeromq (CMake target
// diloco::zeromq; needs libzmq and cppzmq): the syncer's `server` on a ROUTER
// socket (zeromq/server.hpp), learners' `client`s on DEALER sockets
// (zeromq/client.hpp), over tcp://, ipc:// or inproc://, set up with
// `socket_options` (zeromq/options.hpp). Framing and validation follow
// docs/protocol.md. CURVE: key files (zeromq/keys.hpp), the syncer's
// allow-list (zeromq/allow_list.hpp, zeromq/learner_ids.hpp) and the ZAP
// handler that enforces it (zeromq/zap_handler.hpp). `keep_large_blocks`
// (zeromq/keep_large_blocks.hpp) is a process-wide malloc setting that the
// library never applies by itself.
#pragma once

#include "diloco/transport/zeromq/allow_list.hpp"
#include "diloco/transport/zeromq/client.hpp"
#include "diloco/transport/zeromq/keep_large_blocks.hpp"
#include "diloco/transport/zeromq/keys.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"
#include "diloco/transport/zeromq/options.hpp"
#include "diloco/transport/zeromq/security.hpp"
#include "diloco/transport/zeromq/server.hpp"
#include "diloco/transport/zeromq/zap_handler.hpp"
