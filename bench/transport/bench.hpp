// What every transport of bench_transport provides: a `link` that streams
// messages of one size from a sender thread to a receiver thread, and
// ping-pongs one message between two threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

using clock = std::chrono::steady_clock;

/// What arrived during one throughput measurement.
struct stream_result {
  double seconds = 0;          ///< from the sender's first send to the receiver's last message
  std::uint64_t messages = 0;  ///< messages received (all checked)
  std::uint64_t payload_bytes = 0;
};

/// Limits of one measurement.
struct stream_limits {
  double seconds = 0.5;            ///< the sender stops after this much time ...
  std::uint64_t min_messages = 8;  ///< ... once it has sent at least this many
};

/// A sender and a receiver connected by one transport, for messages of one
/// payload size, both on loopback (or in the process). Every wait inside is
/// bounded; a lost, late or corrupt message throws `std::runtime_error`.
class link {
 public:
  virtual ~link() = default;
  /// A sender thread streams messages to a receiver thread that takes and
  /// releases each one, until `limits` are met.
  virtual stream_result stream(const stream_limits& limits) = 0;
  /// Round trips of one message (sent, echoed back by the other side, received)
  /// for about `seconds`, at least `min_trips` and at most `max_trips` of them;
  /// appends each round-trip time in microseconds to `rtt_us`.
  virtual void ping_pong(double seconds, int min_trips, int max_trips, std::vector<double>& rtt_us) = 0;
};

/// Settings every transport gets alike.
struct link_options {
  std::size_t payload_bytes = 0;
  /// Bytes each side may queue (send queue, receive queue), as the transport
  /// counts them; ZeroMQ's high-water marks are this over `payload_bytes`.
  std::size_t queue_bytes = std::size_t{256} << 20;
  /// ZeroMQ only: call `diloco::zeromq::keep_large_blocks()` (process-wide).
  bool zmq_keep_large_blocks = true;
  /// ZeroMQ only: payloads larger than this go in parts of this size
  /// (`socket_options::chunk_bytes`; 0: whole).
  std::size_t zmq_chunk_bytes = std::size_t{1} << 20;
};

// One factory per implementation, each in its own translation unit.
std::unique_ptr<link> make_raw_tcp(const link_options& o, bool checksum);                      // raw_tcp.cpp
std::unique_ptr<link> make_inproc_hub(const link_options& o);                                  // inproc.cpp
std::unique_ptr<link> make_zmq(const link_options& o, const std::string& scheme, bool curve);  // zeromq.cpp
std::unique_ptr<link> make_asio_tcp(const link_options& o);                                    // tcp.cpp

/// GB/s (10⁹ bytes/s) of CRC-32C over `bytes` bytes (one thread, the
/// library's `diloco::crc32c`), the median of `repeat` passes over a buffer of
/// that size. raw_tcp.cpp.
double crc32c_gbps(std::size_t bytes, int repeat);

/// GB/s of libsodium's crypto_box_afternm (CURVE's cipher) on one thread
/// over messages of `message_bytes`, the median of 5 passes over `seconds`.
/// sodium.cpp.
double curve_cipher_gbps(std::size_t message_bytes, double seconds);

/// Empty if `diloco::crc32c` agrees with a bitwise CRC-32C over lengths and
/// offsets that exercise every path (and continuation), else the first
/// disagreement. raw_tcp.cpp.
std::string check_crc32c();

[[noreturn]] inline void fail(const std::string& what) { throw std::runtime_error(what); }

inline double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

}  // namespace bench
