// The ZeroMQ transport, namespace diloco::zeromq (CMake target diloco::zmq;
// needs libzmq and cppzmq; named so as not to clash with cppzmq's ::zmq):
// the syncer on a ROUTER socket, learners on DEALER sockets, over tcp://,
// ipc:// or inproc://. Framing and validation follow docs/protocol.md.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/transport/buffer.hpp"
#include "diloco/transport/message.hpp"
#include "diloco/transport/wire.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace diloco::zeromq {

/// Socket settings shared by both ends.
struct socket_options {
  /// Largest payload accepted; also sets `ZMQ_MAXMSGSIZE` (libzmq drops a peer
  /// that announces more).
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  /// Bytes the send and receive queues may hold, and the size of a typical
  /// message: the high-water marks are `queue_bytes / message_bytes` messages,
  /// so that the budget is in bytes whatever the fragment size.
  std::uint64_t queue_bytes = std::uint64_t{1} << 30;
  std::uint64_t message_bytes = std::uint64_t{16} << 20;
  /// ZeroMQ's own heartbeats (ZMTP PING/PONG): a silent connection is closed
  /// after `heartbeat_timeout`, and the DEALER reconnects.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{2000};
  /// How long unsent messages may delay closing the socket.
  std::chrono::milliseconds linger{1000};
  /// Process-wide, with glibc only; applied once, by the first socket made
  /// with it set, and never undone: freed blocks of up to 32 MiB stay in
  /// malloc's heap for reuse instead of going back to the system
  /// (`mallopt(M_MMAP_THRESHOLD, 32 MiB)` and `mallopt(M_TRIM_THRESHOLD, 1 GiB)`).
  /// libzmq allocates every received message with `malloc`; by default a
  /// large one is a fresh mapping, or heap memory that was handed back, whose
  /// pages fault in again while the message is read (~3-12 µs per 4 KiB page,
  /// as slow as 0.35 GB/s). The cost: up to 1 GiB that the process freed
  /// stays mapped, and glibc no longer adapts these thresholds itself.
  /// Messages over 32 MiB are still fresh mappings (glibc accepts no higher
  /// threshold). Set it to false to leave malloc as it is.
  bool keep_large_blocks = true;
};

namespace detail {

/// See `socket_options::keep_large_blocks`.
inline void keep_large_blocks() noexcept {
#if defined(__GLIBC__)
  static const bool applied = [] {
    (void)::mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)::mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)applied;
#endif
}

/// Applies the process-wide part of `o` (before the socket exists, so that
/// libzmq's I/O thread starts under it) and returns `o`.
inline const socket_options& prepare(const socket_options& o) noexcept {
  if (o.keep_large_blocks) keep_large_blocks();
  return o;
}

inline int high_water_mark(const socket_options& o) {
  const std::uint64_t n = o.queue_bytes / std::max<std::uint64_t>(1, o.message_bytes);
  return static_cast<int>(std::clamp<std::uint64_t>(n, 4, 1u << 20));
}

inline void configure(::zmq::socket_t& s, const socket_options& o) {
  s.set(::zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(o.max_payload_bytes + wire::header_size));
  s.set(::zmq::sockopt::sndhwm, high_water_mark(o));
  s.set(::zmq::sockopt::rcvhwm, high_water_mark(o));
  s.set(::zmq::sockopt::heartbeat_ivl, static_cast<int>(o.heartbeat_interval.count()));
  s.set(::zmq::sockopt::heartbeat_timeout, static_cast<int>(o.heartbeat_timeout.count()));
  s.set(::zmq::sockopt::heartbeat_ttl, static_cast<int>(o.heartbeat_timeout.count()));
  s.set(::zmq::sockopt::reconnect_ivl, static_cast<int>(o.reconnect_interval.count()));
  s.set(::zmq::sockopt::reconnect_ivl_max, static_cast<int>(o.reconnect_interval_max.count()));
  s.set(::zmq::sockopt::linger, static_cast<int>(o.linger.count()));
}

inline std::error_code from_errno(int e) {
  switch (e) {
    case EAGAIN: return errc::queue_full;
    case EHOSTUNREACH: return errc::unknown_peer;
    case ETERM:
    case ENOTSOCK: return errc::closed;
    default: return {e, std::generic_category()};
  }
}

/// Frees a payload handed to libzmq without copying, on libzmq's I/O thread.
inline void release_payload(void* /*data*/, void* hint) noexcept { delete static_cast<byte_buffer*>(hint); }

/// Sends `prefix` (a routing-id frame, or nothing), the header and the
/// payload of `m` without blocking. The payload is handed to libzmq without a
/// copy; `m` is moved from only once the first frame is queued, after which
/// libzmq accepts the rest of the multipart message.
inline std::error_code send(::zmq::socket_t& s, const std::string* prefix, message& m) {
  const bool payload = !m.payload.empty();
  const auto header = wire::encode_header(m.header, m.payload.bytes());
  try {
    const auto more = ::zmq::send_flags::sndmore | ::zmq::send_flags::dontwait;
    if (prefix) {
      if (!s.send(::zmq::buffer(*prefix), more)) return errc::queue_full;
      if (!s.send(::zmq::buffer(header.data(), header.size()), payload ? more : ::zmq::send_flags::dontwait))
        return errc::queue_full;  // not reached: later parts are never refused
    } else if (!s.send(::zmq::buffer(header.data(), header.size()),
                       payload ? more : ::zmq::send_flags::dontwait)) {
      return errc::queue_full;
    }
    if (payload) {
      auto* owned = new byte_buffer(std::move(m.payload));
      ::zmq::message_t frame(owned->data(), owned->size(), release_payload, owned);
      (void)s.send(frame, ::zmq::send_flags::dontwait);
    }
    m = message{};
    return {};
  } catch (const ::zmq::error_t& e) {
    return from_errno(e.num());
  }
}

/// Receives one whole multipart message without blocking, or nothing.
/// `routed`: the first frame is a routing id (ROUTER side).
struct raw_message {
  std::string routing_id;
  std::vector<::zmq::message_t> frames;
};

inline std::optional<raw_message> receive_raw(::zmq::socket_t& s, bool routed) {
  raw_message r;
  ::zmq::message_t frame;
  try {
    if (!s.recv(frame, ::zmq::recv_flags::dontwait)) return std::nullopt;
    bool more = frame.more();
    if (routed) {
      r.routing_id.assign(static_cast<const char*>(frame.data()), frame.size());
      if (!more) return r;
      (void)s.recv(frame, ::zmq::recv_flags::none);  // parts of a message arrive together
      more = frame.more();
    }
    r.frames.push_back(std::move(frame));
    // Never keep more than three frames of a hostile message; drain the rest.
    while (more) {
      ::zmq::message_t next;
      (void)s.recv(next, ::zmq::recv_flags::none);
      more = next.more();
      if (r.frames.size() < 3) r.frames.push_back(std::move(next));
    }
  } catch (const ::zmq::error_t&) {
    return std::nullopt;
  }
  return r;
}

/// Copies `from` to `to` and returns the CRC-32C of the bytes, in blocks of
/// 48 KiB: each block is checksummed, then copied while it is still in
/// cache, so the payload is read from memory once instead of twice
/// (1.1-1.2x the throughput of a checksum pass then a `memcpy` at 1-64 MiB).
inline std::uint32_t copy_and_checksum(std::byte* to, std::span<const std::byte> from) noexcept {
  constexpr std::size_t block = std::size_t{48} << 10;
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < from.size(); at += block) {
    const auto part = from.subspan(at, std::min(block, from.size() - at));
    crc = crc32c(part, crc);
    std::memcpy(to + at, part.data(), part.size());
  }
  return crc;
}

/// Turns frames into a validated message, or an envelope carrying the error.
/// The payload is copied out of libzmq's message into a pooled buffer (whose
/// alignment libzmq's blocks do not have) and checksummed on the way.
inline envelope decode(std::vector<::zmq::message_t>& frames, peer_id from, std::uint64_t max_payload,
                       buffer_pool& pool) {
  envelope e;
  e.from = from;
  auto refuse = [&e](wire_error error) {
    e.error = error;
    return std::move(e);
  };
  if (frames.empty() || frames.size() > 2) return refuse(wire_error::truncated);
  const auto d = wire::decode_header(
      std::span<const std::byte>(static_cast<const std::byte*>(frames[0].data()), frames[0].size()), max_payload);
  if (d.error != wire_error::none) return refuse(d.error);
  const std::span<const std::byte> payload =
      frames.size() == 2 ? std::span<const std::byte>(static_cast<const std::byte*>(frames[1].data()), frames[1].size())
                         : std::span<const std::byte>();
  if (payload.size() != d.payload_bytes) return refuse(wire_error::truncated);
  byte_buffer copy;
  if (!payload.empty()) {
    copy = pool.acquire(payload.size());
    if (copy_and_checksum(copy.data(), payload) != d.payload_crc) return refuse(wire_error::bad_checksum);
  } else if (crc32c(payload) != d.payload_crc) {
    return refuse(wire_error::bad_checksum);
  }
  e.msg.header = d.header;
  e.msg.payload = std::move(copy);
  return e;
}

inline bool wait_readable(::zmq::socket_t& s, std::chrono::nanoseconds timeout) {
  ::zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, std::chrono::nanoseconds::zero()));
  try {
    return ::zmq::poll(&item, 1, ms) > 0;
  } catch (const ::zmq::error_t&) {
    return false;
  }
}

}  // namespace detail

/// A CURVE key pair (RFC 26/CurveZMQ), each key 40 characters of Z85.
struct curve_keypair {
  std::string public_key;
  std::string secret_key;
};

/// A fresh key pair from libzmq (built with libsodium in Debian). Throws
/// `std::runtime_error` if libzmq has no CURVE support.
inline curve_keypair generate_keypair() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error("diloco::zeromq: libzmq has no CURVE support (" + std::string(zmq_strerror(errno)) + ")");
  return {pub, sec};
}

namespace detail {

/// The 32 key bytes of a Z85 key, or nothing if it is not one.
inline std::optional<std::array<std::uint8_t, 32>> decode_key(const std::string& z85) {
  std::array<std::uint8_t, 32> key{};
  if (z85.size() != 40 || zmq_z85_decode(key.data(), z85.c_str()) == nullptr) return std::nullopt;
  return key;
}

inline std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// `name = value` lines of a key file; lines starting with `#` are comments
/// (only whole lines: `#` and `=` are Z85 characters).
inline std::optional<std::string> key_field(const std::filesystem::path& path, const std::string& name) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("diloco::zeromq: cannot read key file " + path.string());
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq != std::string::npos && trim(line.substr(0, eq)) == name) return trim(line.substr(eq + 1));
  }
  return std::nullopt;
}

inline std::string checked_key(const std::filesystem::path& path, const std::string& name) {
  const auto value = key_field(path, name);
  if (!value || !decode_key(*value))
    throw std::runtime_error("diloco::zeromq: " + path.string() + " has no valid '" + name + " = <40 Z85 characters>'");
  return *value;
}

}  // namespace detail

/// Writes `keys` as two files: `secret_file` (both keys, mode 0600) and
/// `public_file` (the public key only, to hand to the other side).
inline void save_keypair(const curve_keypair& keys, const std::filesystem::path& secret_file,
                         const std::filesystem::path& public_file) {
  {
    std::ofstream out(secret_file, std::ios::trunc);
    out << "# diloco CURVE key pair: keep this file secret\npublic-key = " << keys.public_key
        << "\nsecret-key = " << keys.secret_key << "\n";
    if (!out) throw std::runtime_error("diloco::zeromq: cannot write " + secret_file.string());
  }
  std::filesystem::permissions(secret_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  std::ofstream out(public_file, std::ios::trunc);
  out << "# diloco CURVE public key\npublic-key = " << keys.public_key << "\n";
  if (!out) throw std::runtime_error("diloco::zeromq: cannot write " + public_file.string());
}

/// Reads a key pair written by `save_keypair`; throws with the file's name
/// if it is missing or malformed.
inline curve_keypair load_keypair(const std::filesystem::path& secret_file) {
  return {detail::checked_key(secret_file, "public-key"), detail::checked_key(secret_file, "secret-key")};
}

/// Reads the public key of a public (or secret) key file.
inline std::string load_public_key(const std::filesystem::path& file) {
  return detail::checked_key(file, "public-key");
}

/// The syncer's side of CURVE: its key pair and the public keys of the
/// learners it admits.
struct server_security {
  curve_keypair keys;
  std::vector<std::string> allowed;  ///< Z85 public keys
};

/// A learner's side of CURVE: its key pair and the syncer's public key.
struct client_security {
  curve_keypair keys;
  std::string server_key;
};

/// Answers ZeroMQ's authentication requests (ZAP, RFC 27) for one context:
/// a CURVE client is admitted if its public key is on the allow-list. Runs
/// on its own thread, polling with a timeout so that it stops promptly.
class zap_handler {
 public:
  zap_handler(::zmq::context_t& context, const std::vector<std::string>& allowed) : socket_(context, ::zmq::socket_type::rep) {
    for (const auto& k : allowed) {
      const auto key = detail::decode_key(k);
      if (!key) throw std::invalid_argument("diloco::zeromq: allow-list entry '" + k + "' is not a Z85 public key");
      allowed_.insert(*key);
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
        bool ok = request.size() >= 7 && request[5].to_string_view() == "CURVE" && request[6].size() == 32;
        if (ok) {
          std::array<std::uint8_t, 32> key{};
          std::memcpy(key.data(), request[6].data(), 32);
          ok = allowed_.count(key) != 0;
        }
        (ok ? admitted_ : denied_).fetch_add(1);
        const std::string id = request.size() > 1 ? request[1].to_string() : std::string();
        socket_.send(::zmq::str_buffer("1.0"), ::zmq::send_flags::sndmore);
        socket_.send(::zmq::buffer(id), ::zmq::send_flags::sndmore);
        socket_.send(ok ? ::zmq::str_buffer("200") : ::zmq::str_buffer("400"), ::zmq::send_flags::sndmore);
        socket_.send(ok ? ::zmq::str_buffer("OK") : ::zmq::str_buffer("key not on the allow-list"),
                     ::zmq::send_flags::sndmore);
        socket_.send(::zmq::str_buffer(""), ::zmq::send_flags::sndmore);  // user id
        socket_.send(::zmq::str_buffer(""));                              // metadata
      } catch (const ::zmq::error_t&) {
        return;  // the context is shutting down
      }
    }
  }

  ::zmq::socket_t socket_;
  std::set<std::array<std::uint8_t, 32>> allowed_;
  std::atomic<std::uint64_t> admitted_{0}, denied_{0};
  std::jthread thread_;
};

/// The syncer's endpoint: a ROUTER socket bound to `endpoint`
/// (`tcp://127.0.0.1:0` picks a free port; see `endpoint()`), with
/// `ZMQ_ROUTER_MANDATORY` so that a send to a vanished learner fails with
/// `errc::unknown_peer` instead of disappearing. A blocking transport; use
/// from one thread.
///
/// Every connection is its own peer id, a learner's reconnection included:
/// the ROUTER names each connection itself, and a routing id that a peer
/// chooses is no identity (who a message speaks for is in its header, and
/// with CURVE its key must own that learner id). A peer may still announce
/// a routing id (`ZMQ_ROUTING_ID`); without `ZMQ_ROUTER_HANDOVER`, which this
/// socket leaves off, one already in use displaces nothing: libzmq 4.3 keeps
/// the newcomer's connection open but never reads it (its messages pile up
/// to the high-water mark, then TCP holds the rest), so it reaches no one.
class server {
 public:
  /// With `security`, CURVE encrypts every connection and only learners
  /// whose public keys are allowed get through (a ZAP handler on `context`,
  /// of which there can be one per context).
  server(::zmq::context_t& context, const std::string& endpoint, socket_options options = {},
         std::optional<server_security> security = std::nullopt)
      : options_(detail::prepare(options)), socket_(context, ::zmq::socket_type::router) {
    detail::configure(socket_, options_);
    if (security) {
      zap_ = std::make_unique<zap_handler>(context, security->allowed);
      socket_.set(::zmq::sockopt::zap_domain, "diloco");
      socket_.set(::zmq::sockopt::curve_server, 1);
      socket_.set(::zmq::sockopt::curve_secretkey, security->keys.secret_key);
    }
    socket_.set(::zmq::sockopt::router_mandatory, 1);
    socket_.bind(endpoint);
    endpoint_ = socket_.get(::zmq::sockopt::last_endpoint);
  }

  /// The bound endpoint, with the port the system chose.
  const std::string& endpoint() const noexcept { return endpoint_; }
  ::zmq::socket_t& socket() noexcept { return socket_; }

  /// Connections admitted and refused by CURVE authentication (0 without it).
  std::uint64_t admitted() const noexcept { return zap_ ? zap_->admitted() : 0; }
  std::uint64_t denied() const noexcept { return zap_ ? zap_->denied() : 0; }

  std::error_code try_send(peer_id to, message& m) {
    if (to == 0 || to > routing_ids_.size()) return errc::unknown_peer;
    return detail::send(socket_, &routing_ids_[to - 1], m);
  }

  std::optional<envelope> try_receive() {
    auto raw = detail::receive_raw(socket_, true);
    if (!raw) return std::nullopt;
    return detail::decode(raw->frames, peer_of(raw->routing_id), options_.max_payload_bytes, pool_);
  }

  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    if (auto e = try_receive()) return e;
    if (!detail::wait_readable(socket_, timeout)) return std::nullopt;
    return try_receive();
  }

 private:
  peer_id peer_of(const std::string& routing_id) {
    auto [it, fresh] = peers_.try_emplace(routing_id, static_cast<peer_id>(routing_ids_.size() + 1));
    if (fresh) routing_ids_.push_back(routing_id);
    return it->second;
  }

  socket_options options_;
  std::unique_ptr<zap_handler> zap_;  ///< before the socket: destroyed after it
  ::zmq::socket_t socket_;
  std::string endpoint_;
  std::unordered_map<std::string, peer_id> peers_;
  std::vector<std::string> routing_ids_;  ///< by peer id − 1
  buffer_pool pool_;
};

/// Whether `endpoint` only reaches this machine (ipc, inproc, or tcp on a
/// loopback address). Services bind anything else only with CURVE or when
/// told to, so that an unauthenticated syncer is never exposed by accident.
inline bool is_local_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  for (const char* host : {"tcp://127.", "tcp://localhost:", "tcp://[::1]:"})
    if (endpoint.rfind(host, 0) == 0) return true;
  return false;
}

/// A learner's endpoint: a DEALER socket connected to the syncer at
/// `endpoint`, with `ZMQ_IMMEDIATE` (messages queue only on a live
/// connection; before that `try_send` reports `errc::queue_full` and the
/// learner keeps the message) and automatic reconnection. It sets no routing
/// id: the syncer's ROUTER names every connection, so a reconnection is a
/// new peer there. A blocking transport; use from one thread.
class client {
 public:
  /// With `security`, the connection is CURVE-encrypted and authenticated
  /// with the learner's key pair against the syncer's public key.
  /// `learner` and `incarnation` are not used: the learner's messages carry
  /// them (they once chose the routing id).
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options = {},
         std::optional<client_security> security = std::nullopt)
      : options_(detail::prepare(options)), socket_(context, ::zmq::socket_type::dealer) {
    detail::configure(socket_, options_);
    if (security) {
      socket_.set(::zmq::sockopt::curve_serverkey, security->server_key);
      socket_.set(::zmq::sockopt::curve_publickey, security->keys.public_key);
      socket_.set(::zmq::sockopt::curve_secretkey, security->keys.secret_key);
    }
    socket_.set(::zmq::sockopt::immediate, 1);
    socket_.connect(endpoint);
  }

  ::zmq::socket_t& socket() noexcept { return socket_; }

  /// Sends to the syncer (`to` must be `syncer_peer`).
  std::error_code try_send(peer_id to, message& m) {
    if (to != syncer_peer) return errc::unknown_peer;
    return detail::send(socket_, nullptr, m);
  }

  std::optional<envelope> try_receive() {
    auto raw = detail::receive_raw(socket_, false);
    if (!raw) return std::nullopt;
    return detail::decode(raw->frames, syncer_peer, options_.max_payload_bytes, pool_);
  }

  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    if (auto e = try_receive()) return e;
    if (!detail::wait_readable(socket_, timeout)) return std::nullopt;
    return try_receive();
  }

 private:
  socket_options options_;
  ::zmq::socket_t socket_;
  buffer_pool pool_;
};

static_assert(blocking_transport<server>);
static_assert(blocking_transport<client>);

}  // namespace diloco::zeromq
