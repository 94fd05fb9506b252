// The ZeroMQ transport, namespace diloco::zeromq (CMake target diloco::zmq;
// needs libzmq and cppzmq; named so as not to clash with cppzmq's ::zmq):
// the syncer on a ROUTER socket, learners on DEALER sockets, over tcp://,
// ipc:// or inproc://. Framing and validation follow docs/protocol.md.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/transport/buffer.hpp"
#include "diloco/transport/message.hpp"
#include "diloco/transport/wire.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__linux__)
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
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

inline std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

}  // namespace detail

/// A set of learner ids: the ids one CURVE key may speak for. Written as ids
/// and inclusive ranges separated by commas (`0-3,7,9-12`), or `*` for any
/// id. Held as sorted, merged ranges: `contains` costs O(log ranges).
class learner_ids {
 public:
  /// No id at all.
  learner_ids() = default;

  /// Every id.
  static learner_ids any() {
    learner_ids ids;
    ids.any_ = true;
    return ids;
  }

  /// Parses the text form. Throws `std::invalid_argument` that quotes the
  /// text and names what is wrong with it.
  static learner_ids parse(std::string_view text) {
    const auto bad = [text](const std::string& why) {
      return std::invalid_argument("learner ids '" + std::string(text) + "': " + why);
    };
    const std::string all = detail::trim(text);
    if (all == "*") return any();
    if (all.empty()) throw bad("empty; write ids and ranges like 0-3,7 or * for any learner");
    learner_ids ids;
    for (std::size_t start = 0;;) {
      const auto comma = all.find(',', start);
      const std::string item =
          detail::trim(std::string_view(all).substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (item.empty()) throw bad("an empty item between commas");
      if (item == "*") throw bad("'*' stands alone (it already means any learner)");
      const auto dash = item.find('-');
      const auto first = number(dash == std::string::npos ? item : detail::trim(std::string_view(item).substr(0, dash)));
      const auto last = dash == std::string::npos ? first : number(detail::trim(std::string_view(item).substr(dash + 1)));
      if (!first || !last) throw bad("'" + item + "' is neither an id (0 to 4294967295) nor a range of ids (A-B)");
      if (*last < *first) throw bad("the range '" + item + "' ends before it starts");
      ids.add(*first, *last);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return ids;
  }

  /// Adds ids `first` to `last`, both included (`first <= last`).
  learner_ids& add(std::uint32_t first, std::uint32_t last) {
    assert(first <= last);
    if (any_) return *this;
    std::vector<range> merged;
    merged.reserve(ranges_.size() + 1);
    range r{first, last};
    bool placed = false;
    for (const auto& x : ranges_) {
      if (x.last < r.first && r.first - x.last > 1) {
        merged.push_back(x);
      } else if (r.last < x.first && x.first - r.last > 1) {
        if (!placed) merged.push_back(r);
        placed = true;
        merged.push_back(x);
      } else {
        r.first = std::min(r.first, x.first);
        r.last = std::max(r.last, x.last);
      }
    }
    if (!placed) merged.push_back(r);
    ranges_ = std::move(merged);
    return *this;
  }

  bool contains(std::uint32_t id) const noexcept {
    if (any_) return true;
    const auto after = std::upper_bound(ranges_.begin(), ranges_.end(), id,
                                        [](std::uint32_t v, const range& r) { return v < r.first; });
    return after != ranges_.begin() && std::prev(after)->last >= id;
  }

  bool is_any() const noexcept { return any_; }
  bool empty() const noexcept { return !any_ && ranges_.empty(); }

  /// The canonical text: `*`, or merged ranges in increasing order
  /// (`0-3,7`); empty for no id. `parse(to_string())` gives the same set.
  std::string to_string() const {
    if (any_) return "*";
    std::string out;
    for (const auto& r : ranges_) {
      if (!out.empty()) out += ',';
      out += std::to_string(r.first);
      if (r.last != r.first) out += '-' + std::to_string(r.last);
    }
    return out;
  }

  friend bool operator==(const learner_ids&, const learner_ids&) = default;

 private:
  struct range {
    std::uint32_t first, last;
    friend bool operator==(const range&, const range&) = default;
  };

  static std::optional<std::uint32_t> number(const std::string& digits) {
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    std::uint32_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
    return v;
  }

  bool any_ = false;
  std::vector<range> ranges_;  ///< sorted, neither overlapping nor touching
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
/// With `owned` (the ids the sender's key may speak for), a well-formed
/// header naming another learner gives `wire_error::unauthorized`, with the
/// header kept and the payload neither copied nor checked.
inline envelope decode(std::vector<::zmq::message_t>& frames, peer_id from, std::uint64_t max_payload,
                       buffer_pool& pool, const learner_ids* owned = nullptr) {
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
  if (owned && !owned->contains(d.header.learner)) {
    e.msg.header = d.header;
    return refuse(wire_error::unauthorized);
  }
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
/// `public_file` (the public key, to hand to the other side). With
/// `learners`, the public file also says which learner ids the key may speak
/// for (a `learners = ...` line), which makes it an allow-list entry for
/// `load_allow_list`. Throws `std::invalid_argument` for a set with no id.
inline void save_keypair(const curve_keypair& keys, const std::filesystem::path& secret_file,
                         const std::filesystem::path& public_file,
                         const std::optional<learner_ids>& learners = std::nullopt) {
  if (learners && learners->empty())
    throw std::invalid_argument("diloco::zeromq: a key for no learner id at all would admit nobody");
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
  if (learners) out << "learners = " << learners->to_string() << "\n";
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

/// An allow-list entry: a learner's CURVE public key and the learner ids
/// that a connection authenticated with it may name in its messages.
struct allowed_key {
  std::string public_key;  ///< 40 characters of Z85
  learner_ids learners;

  allowed_key(std::string key, learner_ids ids) : public_key(std::move(key)), learners(std::move(ids)) {}
};

/// Reads an allow-list: one or more entries, each a line
/// `public-key = <40 Z85 characters>` followed by a line
/// `learners = <ids>` (`0-3,7`, or `*` for any learner) for that key. Blank
/// lines and whole lines starting with `#` are ignored, so a `.pub` file
/// written with `diloco_keygen NAME --learners IDS` is an allow-list, and so
/// are several of them concatenated. Throws `std::runtime_error` naming the
/// file and the line for a missing `learners` line, a malformed key or id
/// set, a key listed twice, a secret key, an unknown field or no key at all.
inline std::vector<allowed_key> load_allow_list(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("diloco::zeromq: cannot read allow-list " + path.string());
  const auto fail = [&path](std::size_t line, const std::string& why) {
    return std::runtime_error("diloco::zeromq: " + path.string() + ":" + std::to_string(line) + ": " + why);
  };
  struct pending {
    std::string key;
    std::size_t line;
    std::optional<learner_ids> learners;
  };
  std::vector<pending> entries;
  const auto require_learners = [&](const pending& p) {
    if (!p.learners)
      throw fail(p.line, "the key has no 'learners = ...' line after it; add 'learners = <ids>' (like 0-3,7) "
                         "for the learner ids it may speak for, or 'learners = *' to let it speak for any learner");
  };
  std::size_t number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    const std::string line = detail::trim(text);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw fail(number, "expected 'name = value', found '" + line + "'");
    const std::string name = detail::trim(std::string_view(line).substr(0, eq));
    const std::string value = detail::trim(std::string_view(line).substr(eq + 1));
    if (name == "public-key") {
      if (!detail::decode_key(value)) throw fail(number, "'" + value + "' is not a public key (40 Z85 characters)");
      for (const auto& e : entries)
        if (e.key == value) throw fail(number, "this key is already listed on line " + std::to_string(e.line));
      if (!entries.empty()) require_learners(entries.back());
      entries.push_back({value, number, std::nullopt});
    } else if (name == "learners") {
      if (entries.empty()) throw fail(number, "'learners' before any 'public-key' line");
      if (entries.back().learners)
        throw fail(number, "a second 'learners' line for the key on line " + std::to_string(entries.back().line));
      try {
        entries.back().learners = learner_ids::parse(value);
      } catch (const std::invalid_argument& e) {
        throw fail(number, e.what());
      }
    } else if (name == "secret-key") {
      throw fail(number, "a secret key has no place in an allow-list: give the learner's .pub file, not its .key");
    } else {
      throw fail(number, "unknown field '" + name + "' (expected 'public-key' or 'learners')");
    }
  }
  if (entries.empty())
    throw std::runtime_error("diloco::zeromq: " + path.string() + " has no 'public-key = ...' line");
  require_learners(entries.back());
  std::vector<allowed_key> list;
  list.reserve(entries.size());
  for (auto& e : entries) list.emplace_back(std::move(e.key), std::move(*e.learners));
  return list;
}

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

namespace detail {

/// accept(2) errors for want of descriptors (EMFILE, ENFILE) or memory
/// (ENOBUFS, ENOMEM): the connection stays queued and the listening socket
/// stays readable.
inline bool out_of_resources(int error) noexcept {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

/// What `shed_pending` did: connections accepted and closed at once, and the
/// errno that stopped it (EAGAIN: none left waiting).
struct shed_result {
  std::uint64_t closed = 0;
  int error = 0;
};

#if defined(__linux__)
struct shed_job {
  int listener;
  int spare;
  shed_result result;
};

/// Runs in the child of `shed_pending`, on its own stack, with every signal
/// blocked; touches nothing but `job` and `errno`.
inline int shed_in_child(void* arg) noexcept {
  auto* job = static_cast<shed_job*>(arg);
  (void)::close(job->spare);  // this copy of the table only: one free slot, for the child alone
  for (int attempt = 0; attempt < (1 << 16); ++attempt) {
    const int fd = ::accept4(job->listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == ECONNABORTED || errno == EPROTO || errno == EINTR) continue;
      job->result.error = errno;
      break;
    }
    (void)::close(fd);
    ++job->result.closed;
  }
  return 0;
}
#endif

/// Accepts and at once closes the connections waiting on the non-blocking
/// listening socket `listener`, although this process has no descriptor to
/// spare: a child sharing our memory but with its own copy of the
/// descriptor table (clone(2) with CLONE_VM | CLONE_VFORK, as posix_spawn
/// starts one) closes its copy of `spare` and accepts into that slot, which
/// no thread of ours can take first. Blocks the calling thread for the
/// child's life, ~0.1 ms plus a few µs per connection (at most 65536).
/// Nothing if no child could be started (or not on Linux).
inline std::optional<shed_result> shed_pending(int listener, int spare, std::span<std::byte> stack) noexcept {
#if defined(__linux__)
  shed_job job{listener, spare, {}};
  const int saved_errno = errno;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const auto top = reinterpret_cast<std::uintptr_t>(stack.data() + stack.size()) & ~std::uintptr_t{63};
  const int child = ::clone(shed_in_child, reinterpret_cast<void*>(top), CLONE_VM | CLONE_VFORK, &job);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (child > 0) {
    int status = 0;
    while (::waitpid(child, &status, __WCLONE) < 0 && errno == EINTR) {
    }
  }
  errno = saved_errno;
  if (child <= 0) return std::nullopt;
  return job.result;
#else
  (void)listener, (void)spare, (void)stack;
  return std::nullopt;
#endif
}

/// Keeps a ROUTER's tcp listener from spinning when accept(2) fails for
/// want of descriptors or memory. libzmq 4.3 then gives up on the
/// connection, leaves it queued, and is woken again at once by the
/// still-readable listening socket: its I/O thread runs at 100 % of a core
/// until connections drop. (Unbinding would stop that, but it also closes
/// every connection the listener accepted.)
///
/// A socket monitor reports the failed accepts; `service`, called from the
/// server's own receive calls, then sheds the waiting connections
/// (`shed_pending`): they are accepted and closed at once, so their peers
/// retry later; established connections and the listener stay as they are.
/// If shedding takes none (out of memory, or the whole system out of files),
/// the watch stops reading the monitor for a pause (50 ms, doubling up to
/// 2 s, back to 50 ms once shedding works or after 4 s without a failure):
/// libzmq's I/O thread then waits, for the rest of the pause, as soon as its
/// queue of unread events is full (~2000 events, a few ms of spinning), and
/// with it every connection it serves. Whenever the server is not reading
/// for a while, the same wait can happen after ~2000 failed accepts.
class listener_watch {
 public:
  static constexpr std::chrono::milliseconds first_pause{50}, longest_pause{2000};

  /// Starts the monitor; call before `router` binds.
  listener_watch(::zmq::context_t& context, ::zmq::socket_t& router)
      : router_(router), events_(context, ::zmq::socket_type::pair), stack_(std::make_unique<std::byte[]>(stack_bytes)) {
    static std::atomic<std::uint64_t> made{0};
    const std::string name = "inproc://diloco.zeromq.listener-watch." + std::to_string(made.fetch_add(1));
    if (zmq_socket_monitor(router.handle(), name.c_str(), ZMQ_EVENT_LISTENING | ZMQ_EVENT_ACCEPT_FAILED) != 0)
      throw ::zmq::error_t();
    try {
      events_.set(::zmq::sockopt::linger, 0);
      events_.connect(name);
    } catch (...) {
      (void)zmq_socket_monitor(router.handle(), nullptr, 0);
      throw;
    }
#if defined(__linux__)
    spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
#endif
  }

  /// Stops the monitor, draining its events meanwhile on a helper thread:
  /// libzmq's I/O thread may be waiting for room, holding the lock that
  /// stopping needs.
  ~listener_watch() {
    std::atomic<bool> stopped{false};
    std::thread drainer;
    try {
      drainer = std::thread([this, &stopped] {
        while (!stopped.load())
          if (wait_readable(events_, std::chrono::milliseconds(10))) (void)drain();
      });
    } catch (...) {
      (void)drain();
    }
    (void)zmq_socket_monitor(router_.handle(), nullptr, 0);
    stopped.store(true);
    if (drainer.joinable()) drainer.join();
#if defined(__linux__)
    if (spare_ >= 0) (void)::close(spare_);
#endif
  }

  listener_watch(const listener_watch&) = delete;
  listener_watch& operator=(const listener_watch&) = delete;

  /// Learns the listening socket from the monitor's report of the bind
  /// (made synchronously by `bind`; waits at most a second) and makes it
  /// non-blocking, so that an accept never waits (libzmq's included).
  void attach() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (listener_ < 0 && std::chrono::steady_clock::now() < end)
      if (wait_readable(events_, std::chrono::milliseconds(100))) (void)drain();
#if defined(__linux__)
    if (listener_ >= 0) {
      const int flags = ::fcntl(listener_, F_GETFL);
      if (flags >= 0) (void)::fcntl(listener_, F_SETFL, flags | O_NONBLOCK);
    }
#endif
  }

  /// The socket to poll for new events, unless `paused`.
  ::zmq::socket_t& events() noexcept { return events_; }
  bool paused(std::chrono::steady_clock::time_point now) const noexcept { return now < paused_until_; }
  std::chrono::steady_clock::time_point paused_until() const noexcept { return paused_until_; }

  /// Reads the monitor's events and sheds or pauses as the class comment
  /// says. Never blocks beyond a shed; does nothing while paused.
  void service(std::chrono::steady_clock::time_point now) {
    if (paused(now)) return;
    if (!drain()) {
      if (now - last_failure_ > 2 * longest_pause) backoff_ = first_pause;
      return;
    }
    last_failure_ = now;
    if (listener_ >= 0 && !readable(listener_)) return;  // the queue emptied meanwhile
    const auto shed = listener_ >= 0 ? shed_pending(listener_, spare_, {stack_.get(), stack_bytes}) : std::nullopt;
    if (shed) connections_shed_ += shed->closed;
    if (shed && (shed->closed > 0 || !readable(listener_))) {
      backoff_ = first_pause;
      return;
    }
    ++listener_pauses_;
    paused_until_ = now + backoff_;
    backoff_ = std::min(backoff_ * 2, std::chrono::duration_cast<std::chrono::nanoseconds>(longest_pause));
  }

  std::uint64_t accept_failures() const noexcept { return accept_failures_; }
  std::uint64_t connections_shed() const noexcept { return connections_shed_; }
  std::uint64_t listener_pauses() const noexcept { return listener_pauses_; }

 private:
  static constexpr std::size_t stack_bytes = std::size_t{64} << 10;

  /// Reads every pending event; true if an accept failed for want of
  /// resources.
  bool drain() {
    bool failed = false;
    try {
      for (;;) {
        ::zmq::message_t head, address;
        if (!events_.recv(head, ::zmq::recv_flags::dontwait)) break;
        if (head.more()) (void)events_.recv(address, ::zmq::recv_flags::none);
        if (head.size() != 6) continue;
        std::uint16_t event = 0;
        std::uint32_t value = 0;
        std::memcpy(&event, head.data(), 2);
        std::memcpy(&value, static_cast<const std::byte*>(head.data()) + 2, 4);
        if (event == ZMQ_EVENT_LISTENING && listener_ < 0) {
          listener_ = static_cast<int>(value);
        } else if (event == ZMQ_EVENT_ACCEPT_FAILED && out_of_resources(static_cast<int>(value))) {
          ++accept_failures_;
          failed = true;
        }
      }
    } catch (const ::zmq::error_t&) {
      // the context is shutting down
    }
    return failed;
  }

  static bool readable(int fd) noexcept {
#if defined(__linux__)
    ::pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
#else
    (void)fd;
    return true;
#endif
  }

  ::zmq::socket_t& router_;
  ::zmq::socket_t events_;
  std::unique_ptr<std::byte[]> stack_;  ///< the shedding child's stack
  int listener_ = -1;
  int spare_ = -1;  ///< an open /dev/null whose slot the shedding child frees in its table
  std::chrono::steady_clock::time_point paused_until_{}, last_failure_{};
  std::chrono::nanoseconds backoff_ = first_pause;
  std::uint64_t accept_failures_ = 0, connections_shed_ = 0, listener_pauses_ = 0;
};

}  // namespace detail

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
///
/// With CURVE, each message is checked against the key its connection
/// authenticated with: a header naming a learner id that the key's
/// allow-list entry does not hold arrives as `wire_error::unauthorized`,
/// with the claimed header and without the payload.
///
/// On a tcp endpoint, a process out of descriptors (or memory) does not
/// make libzmq's I/O thread spin on the connections it cannot accept: they
/// are closed as soon as they arrive, from within `try_receive` and
/// `receive_for`, while established connections carry on (see
/// `detail::listener_watch`; the counts are `accept_failures`,
/// `connections_shed` and `listener_pauses`). Call one of the two regularly.
class server {
 public:
  /// With `security`, CURVE encrypts every connection, only learners whose
  /// public keys are allowed get through (a ZAP handler on `context`, of
  /// which there can be one per context), and each key speaks only for its
  /// learner ids.
  server(::zmq::context_t& context, const std::string& endpoint, socket_options options = {},
         std::optional<server_security> security = std::nullopt)
      : options_(detail::prepare(options)), socket_(context, ::zmq::socket_type::router) {
    detail::configure(socket_, options_);
    if (security) {
      zap_ = std::make_unique<zap_handler>(context, security->allowed);
      for (auto& a : security->allowed) learners_.push_back(std::move(a.learners));
      socket_.set(::zmq::sockopt::zap_domain, "diloco");
      socket_.set(::zmq::sockopt::curve_server, 1);
      socket_.set(::zmq::sockopt::curve_secretkey, security->keys.secret_key);
    }
    socket_.set(::zmq::sockopt::router_mandatory, 1);
    if (endpoint.rfind("tcp://", 0) == 0) watch_ = std::make_unique<detail::listener_watch>(context, socket_);
    socket_.bind(endpoint);
    if (watch_) watch_->attach();
    endpoint_ = socket_.get(::zmq::sockopt::last_endpoint);
  }

  /// The bound endpoint, with the port the system chose.
  const std::string& endpoint() const noexcept { return endpoint_; }
  ::zmq::socket_t& socket() noexcept { return socket_; }

  /// Connections admitted and refused by CURVE authentication (0 without it).
  std::uint64_t admitted() const noexcept { return zap_ ? zap_->admitted() : 0; }
  std::uint64_t denied() const noexcept { return zap_ ? zap_->denied() : 0; }

  /// Accepts that libzmq reported failed for want of descriptors or memory
  /// (each retry of a spinning listener counts; 0 off tcp).
  std::uint64_t accept_failures() const noexcept { return watch_ ? watch_->accept_failures() : 0; }
  /// Connections closed as soon as accepted because the process was out of
  /// descriptors.
  std::uint64_t connections_shed() const noexcept { return watch_ ? watch_->connections_shed() : 0; }
  /// Times the server let libzmq's I/O thread wait because shedding could
  /// not empty the queue of waiting connections.
  std::uint64_t listener_pauses() const noexcept { return watch_ ? watch_->listener_pauses() : 0; }

  std::error_code try_send(peer_id to, message& m) {
    if (to == 0 || to > routing_ids_.size()) return errc::unknown_peer;
    return detail::send(socket_, &routing_ids_[to - 1], m);
  }

  std::optional<envelope> try_receive() {
    if (watch_) watch_->service(std::chrono::steady_clock::now());
    auto raw = detail::receive_raw(socket_, true);
    if (!raw) return std::nullopt;
    const learner_ids* owned = zap_ && !raw->frames.empty() ? &learners_of(raw->frames.front()) : nullptr;
    return detail::decode(raw->frames, peer_of(raw->routing_id), options_.max_payload_bytes, pool_, owned);
  }

  /// Waits up to `timeout`, rounded up to a whole millisecond, for a
  /// message; returns as soon as one arrives. Reads the listener watch's
  /// events meanwhile.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::max(timeout, std::chrono::nanoseconds::zero());
    for (;;) {
      if (auto e = try_receive()) return e;
      const auto now = clock::now();
      if (now >= deadline) return std::nullopt;
      auto wait = deadline - now;
      ::zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, 0, ZMQ_POLLIN, 0}};
      int watched = 1;
      if (watch_ && watch_->paused(now))
        wait = std::min<clock::duration>(wait, watch_->paused_until() - now);
      else if (watch_)
        items[watched++].socket = watch_->events().handle();
      try {
        (void)::zmq::poll(items, static_cast<std::size_t>(watched), std::chrono::ceil<std::chrono::milliseconds>(wait));
      } catch (const ::zmq::error_t&) {
        return std::nullopt;
      }
    }
  }

 private:
  /// The ids the key behind `frame`'s connection may speak for: its
  /// allow-list entry, named by the User-Id our ZAP handler gave it.
  const learner_ids& learners_of(const ::zmq::message_t& frame) const {
    static const learner_ids nobody;
    const char* user = zmq_msg_gets(frame.handle(), "User-Id");
    if (!user) return nobody;
    const std::string_view text(user);
    std::size_t index = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || index >= learners_.size())
      return nobody;
    return learners_[index];
  }

  peer_id peer_of(const std::string& routing_id) {
    auto [it, fresh] = peers_.try_emplace(routing_id, static_cast<peer_id>(routing_ids_.size() + 1));
    if (fresh) routing_ids_.push_back(routing_id);
    return it->second;
  }

  socket_options options_;
  std::unique_ptr<zap_handler> zap_;  ///< before the socket: destroyed after it
  std::vector<learner_ids> learners_;  ///< by allow-list entry
  ::zmq::socket_t socket_;
  std::unique_ptr<detail::listener_watch> watch_;  ///< tcp only; after the socket: destroyed before it
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
  /// `learner` and `incarnation` are not used: the learner's messages carry
  /// them (they once chose the routing id).
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options = {})
      : options_(detail::prepare(options)), socket_(context, ::zmq::socket_type::dealer) {
    connect(endpoint, nullptr);
  }

  /// With CURVE: the connection is encrypted and authenticated with the
  /// learner's key pair against the syncer's public key.
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options, const client_security& security)
      : options_(detail::prepare(options)), socket_(context, ::zmq::socket_type::dealer) {
    connect(endpoint, &security);
  }

  /// With CURVE if `security` holds keys.
  client(::zmq::context_t& context, const std::string& endpoint, std::uint32_t /*learner*/,
         std::uint32_t /*incarnation*/, socket_options options, const std::optional<client_security>& security)
      : options_(detail::prepare(options)), socket_(context, ::zmq::socket_type::dealer) {
    connect(endpoint, security ? &*security : nullptr);
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
  void connect(const std::string& endpoint, const client_security* security) {
    detail::configure(socket_, options_);
    if (security) {
      socket_.set(::zmq::sockopt::curve_serverkey, security->server_key);
      socket_.set(::zmq::sockopt::curve_publickey, security->keys.public_key);
      socket_.set(::zmq::sockopt::curve_secretkey, security->keys.secret_key);
    }
    socket_.set(::zmq::sockopt::immediate, 1);
    socket_.connect(endpoint);
  }

  socket_options options_;
  ::zmq::socket_t socket_;
  buffer_pool pool_;
};

static_assert(blocking_transport<server>);
static_assert(blocking_transport<client>);

}  // namespace diloco::zeromq
