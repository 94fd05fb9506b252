// diloco::zeromq::zap_handler: the thread that answers libzmq's
// authentication requests (ZAP) for a CURVE server from its allow-list.
#pragma once

#include <zmq.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "diloco/transport/zeromq/allow_list.hpp"
#include "diloco/transport/zeromq/detail/socket.hpp"
#include "diloco/transport/zeromq/keys.hpp"

namespace diloco::zeromq {

/// Answers ZeroMQ's authentication requests (ZAP, RFC 27) for one context:
/// a CURVE client is admitted if its public key is on the allow-list, and
/// its connection's User-Id (the `User-Id` property of every message it
/// sends) is then the index of its entry in `allowed`, in decimal. Runs on
/// its own thread, polling with a timeout so that it stops promptly.
class zap_handler {
 public:
  /// Throws `std::invalid_argument` for a malformed key or one listed twice.
  zap_handler(::zmq::context_t& context, const std::vector<allowed_key>& allowed)
      : socket_(context, ::zmq::socket_type::rep) {
    for (std::size_t i = 0; i < allowed.size(); ++i) {
      const auto key = detail::decode_key(allowed[i].public_key);
      if (!key)
        throw std::invalid_argument("diloco::zeromq: allow-list entry '" + allowed[i].public_key +
                                    "' is not a Z85 public key");
      if (!allowed_.emplace(*key, i).second)
        throw std::invalid_argument("diloco::zeromq: public key " + allowed[i].public_key +
                                    " is on the allow-list twice");
    }
    socket_.set(::zmq::sockopt::linger, 0);
    socket_.bind("inproc://zeromq.zap.01");
    thread_ = std::jthread([this](std::stop_token stop) { serve(stop); });
  }
  ~zap_handler() {
    thread_.request_stop();
    thread_.join();
  }
  zap_handler(const zap_handler&) = delete;
  zap_handler& operator=(const zap_handler&) = delete;

  std::uint64_t admitted() const noexcept { return admitted_.load(); }
  std::uint64_t denied() const noexcept { return denied_.load(); }

 private:
  void serve(std::stop_token stop) {
    while (!stop.stop_requested()) {
      if (!detail::wait_readable(socket_, std::chrono::milliseconds(100))) continue;
      std::vector<::zmq::message_t> request;
      try {
        for (bool more = true; more;) {
          ::zmq::message_t frame;
          if (!socket_.recv(frame, ::zmq::recv_flags::dontwait)) break;
          more = frame.more();
          if (request.size() < 8) request.push_back(std::move(frame));
        }
        // version, request id, domain, address, identity, mechanism, credentials...
        std::string user;
        bool ok = request.size() >= 7 && request[5].to_string_view() == "CURVE" && request[6].size() == 32;
        if (ok) {
          std::array<std::uint8_t, 32> key{};
          std::memcpy(key.data(), request[6].data(), 32);
          const auto entry = allowed_.find(key);
          ok = entry != allowed_.end();
          if (ok) user = std::to_string(entry->second);
        }
        (ok ? admitted_ : denied_).fetch_add(1);
        const std::string id = request.size() > 1 ? request[1].to_string() : std::string();
        socket_.send(::zmq::str_buffer("1.0"), ::zmq::send_flags::sndmore);
        socket_.send(::zmq::buffer(id), ::zmq::send_flags::sndmore);
        socket_.send(ok ? ::zmq::str_buffer("200") : ::zmq::str_buffer("400"), ::zmq::send_flags::sndmore);
        socket_.send(ok ? ::zmq::str_buffer("OK") : ::zmq::str_buffer("key not on the allow-list"),
                     ::zmq::send_flags::sndmore);
        socket_.send(::zmq::buffer(user), ::zmq::send_flags::sndmore);
        socket_.send(::zmq::str_buffer(""));  // metadata
      } catch (const ::zmq::error_t&) {
        return;  // the context is shutting down
      }
    }
  }

  ::zmq::socket_t socket_;
  std::map<std::array<std::uint8_t, 32>, std::size_t> allowed_;  ///< key → entry index
  std::atomic<std::uint64_t> admitted_{0}, denied_{0};
  std::jthread thread_;
};

}  // namespace diloco::zeromq
