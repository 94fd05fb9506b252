// diloco::zeromq: a DEALER (learner) and a ROUTER (syncer) over inproc://,
// ipc:// or tcp://127.0.0.1, with or without CURVE. Over ipc and tcp each side
// has its own context (its own I/O thread), as two processes would; inproc://
// needs both in one context.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>

#include <diloco/transport/zeromq.hpp>

#include "endpoint_link.hpp"

namespace bench {
namespace {

std::atomic<int> links_made{0};

diloco::zeromq::socket_options zmq_options(const link_options& o) {
  diloco::zeromq::socket_options s;
  s.queue_bytes = o.queue_bytes;
  s.message_bytes = o.payload_bytes;
  s.chunk_bytes = o.zmq_chunk_bytes;
  return s;
}

class zmq_link final : public endpoint_link<diloco::zeromq::client, diloco::zeromq::server> {
 public:
  zmq_link(const link_options& o, const std::string& scheme, bool curve)
      : endpoint_link(o, "zmq"), separate_(scheme != "inproc") {
    const int n = links_made.fetch_add(1);
    std::string address;
    if (scheme == "inproc") {
      address = "inproc://bench-transport-" + std::to_string(n);
    } else if (scheme == "ipc") {
      ipc_path_ = std::filesystem::temp_directory_path() /
                  ("diloco-bench-transport-" + std::to_string(::getpid()) + "-" + std::to_string(n));
      address = "ipc://" + ipc_path_.string();
    } else if (scheme == "tcp") {
      address = "tcp://127.0.0.1:*";
    } else {
      fail("zmq: unknown scheme " + scheme);
    }
    if (o.zmq_keep_large_blocks) diloco::zeromq::keep_large_blocks();
    std::optional<diloco::zeromq::server_security> server_keys;
    std::optional<diloco::zeromq::client_security> client_keys;
    if (curve) {
      const auto syncer = diloco::zeromq::generate_keypair();
      const auto learner = diloco::zeromq::generate_keypair();
      server_keys = diloco::zeromq::server_security{syncer, {{learner.public_key, diloco::zeromq::learner_ids::any()}}};
      client_keys = diloco::zeromq::client_security{learner, syncer.public_key};
    }
    syncer_.emplace(syncer_context_, address, zmq_options(o), server_keys);
    learner_.emplace(separate_ ? learner_context_ : syncer_context_, syncer_->endpoint(), 1, 1, zmq_options(o),
                     client_keys);
    connect(*learner_, *syncer_, diloco::syncer_peer);
  }

  ~zmq_link() override {
    learner_.reset();
    syncer_.reset();
    if (!ipc_path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove(ipc_path_, ignored);
    }
  }

 private:
  bool separate_;
  std::filesystem::path ipc_path_;
  ::zmq::context_t syncer_context_;
  ::zmq::context_t learner_context_;  ///< started only if used
  std::optional<diloco::zeromq::server> syncer_;
  std::optional<diloco::zeromq::client> learner_;
};

}  // namespace

std::unique_ptr<link> make_zmq(const link_options& o, const std::string& scheme, bool curve) {
  return std::make_unique<zmq_link>(o, scheme, curve);
}

}  // namespace bench
