// The TCP transport on standalone Asio, namespace diloco::tcp (CMake target
// diloco::asio; needs only Asio's headers, no Boost; named so as not to clash
// with ::asio): the syncer's `server` accepts connections, each learner's
// `client` connects to it and reconnects by itself. Each direction of a
// connection is a stream of 144-byte headers, each followed by the payload it
// announces (docs/protocol.md, "Framing", TCP). `serve` drives a syncer on a
// `server` with Asio timers, sleeping until a message or a deadline.
#pragma once

#include <asio/connect.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#endif

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/transport/buffer.hpp"
#include "diloco/transport/message.hpp"
#include "diloco/transport/wire.hpp"

namespace diloco::tcp {

/// Settings of both ends. Budgets count header and payload bytes.
///
/// `SO_SNDBUF`/`SO_RCVBUF` are never set: fixing them turns off the kernel's
/// autotuning, which long fat links need.
struct socket_options {
  /// Largest payload accepted; a header announcing more is refused
  /// (`wire_error::oversized`) before anything is allocated for it, and the
  /// connection is closed.
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  /// Bytes queued for writing on one connection. A `try_send` that would go
  /// past it fails with `errc::queue_full` (one message is always admitted
  /// into an empty queue, whatever its size).
  std::uint64_t send_queue_bytes = std::uint64_t{1} << 30;
  /// Bytes of received messages waiting for `try_receive`. Past it the
  /// endpoint stops reading from its sockets until the queue drains, and TCP
  /// flow control holds the senders back; the queue overshoots by at most one
  /// message per connection.
  std::uint64_t receive_queue_bytes = std::uint64_t{1} << 30;
  /// Client: the wait before reconnecting after a lost connection or a failed
  /// attempt, doubled after each failed attempt up to `reconnect_interval_max`.
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{2000};
  /// Client: a connection attempt still pending after this is abandoned.
  std::chrono::milliseconds connect_timeout{5000};
  /// TCP keepalive (Linux): a connection silent for `keepalive_idle` is probed
  /// every `keepalive_interval`; after `keepalive_probes` unanswered probes the
  /// kernel closes it. A zero `keepalive_idle` turns keepalive off.
  std::chrono::seconds keepalive_idle{5};
  std::chrono::seconds keepalive_interval{1};
  int keepalive_probes = 5;
  /// How long the destructor waits for queued messages to be written.
  std::chrono::milliseconds linger{1000};
};

namespace detail {

/// A message waiting to be written: its encoded header, and the payload
/// (written from where it is, never copied).
struct outgoing {
  std::array<std::byte, wire::header_size> header{};
  byte_buffer payload;
  std::uint64_t size() const noexcept { return wire::header_size + payload.size(); }
};

/// One TCP connection, one peer.
struct connection {
  connection(::asio::ip::tcp::socket s, peer_id peer) : socket(std::move(s)), id(peer) {}

  ::asio::ip::tcp::socket socket;
  const peer_id id;
  // I/O thread only.
  std::array<std::byte, wire::header_size> header_in{};
  wire::decoded_header decoded;
  byte_buffer payload_in;
  std::vector<outgoing> in_flight;
  std::vector<::asio::const_buffer> gather;
  // Guarded by io_core::mutex_.
  std::deque<outgoing> queue;
  std::uint64_t queued_bytes = 0;  ///< in `queue` and `in_flight`
  bool writing = false;            ///< a write is posted or running
  bool open = true;
};

using connection_ptr = std::shared_ptr<connection>;

/// Messages gathered into one write (two buffers each).
inline constexpr std::size_t max_gather = 32;

/// Payload bytes a header announces (what the receiver will read after it).
inline std::uint64_t announced_payload(const message_header& h) noexcept {
  return wire::carries_payload(h.kind) ? h.element_count * wire::element_size(h.codec) : 0;
}

inline void configure(::asio::ip::tcp::socket& s, const socket_options& o) {
  std::error_code ignored;
  s.set_option(::asio::ip::tcp::no_delay(true), ignored);
  if (o.keepalive_idle.count() <= 0) return;
  s.set_option(::asio::socket_base::keep_alive(true), ignored);
#if defined(__linux__) && defined(TCP_KEEPIDLE)
  const int fd = s.native_handle();
  const int idle = static_cast<int>(o.keepalive_idle.count());
  const int interval = static_cast<int>(std::max<std::int64_t>(1, o.keepalive_interval.count()));
  const int probes = std::max(1, o.keepalive_probes);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
#endif
}

/// What `server` and `client` share: the I/O thread and its `io_context`, the
/// connections, their send queues, and the receive queue. Sockets, reads and
/// writes live on the I/O thread; `try_send`, `try_receive` and
/// `receive_for` may be called from any thread.
class io_core {
 public:
  explicit io_core(const socket_options& options) : options_(options) {}
  io_core(const io_core&) = delete;
  io_core& operator=(const io_core&) = delete;
  ~io_core() { assert(!thread_.joinable() && "the owner stops the I/O thread before its own members go"); }

  ::asio::io_context& context() noexcept { return io_; }
  const socket_options& options() const noexcept { return options_; }
  /// Set on the I/O thread once shutdown began; I/O thread only.
  bool stopping() const noexcept { return stopping_; }

  /// Called on the I/O thread when a connection closes (before `start`).
  void on_closed(std::function<void(peer_id)> f) { on_closed_ = std::move(f); }

  void start() {
    thread_ = std::thread([this] { io_.run(); });
  }

  /// Waits up to `linger` for the send queues to empty, then, on the I/O
  /// thread, runs `close_owned` (the owner closes its acceptor and timers)
  /// and closes every connection; joins the thread once nothing is pending.
  template <class F>
  void stop(F close_owned) {
    if (!thread_.joinable()) return;
    {
      std::unique_lock lock(mutex_);
      written_.wait_for(lock, options_.linger, [this] {
        return std::all_of(connections_.begin(), connections_.end(),
                           [](const auto& kv) { return kv.second->queued_bytes == 0; });
      });
    }
    ::asio::post(io_, [this, close_owned]() mutable {
      stopping_ = true;
      close_owned();
      std::vector<connection_ptr> all;
      {
        std::lock_guard lock(mutex_);
        for (const auto& kv : connections_) all.push_back(kv.second);
        paused_.clear();
      }
      for (const auto& c : all) close(c);
    });
    work_.reset();
    thread_.join();
  }

  /// Makes a connected socket peer `id` and starts reading from it. I/O thread.
  void adopt(::asio::ip::tcp::socket socket, peer_id id) {
    configure(socket, options_);
    auto c = std::make_shared<connection>(std::move(socket), id);
    {
      std::lock_guard lock(mutex_);
      connections_[id] = c;
    }
    read_header(c);
  }

  /// Queues `m` on the connection of peer `to`; `absent` is the error when
  /// there is none. Encodes the header (one CRC pass over the payload) on the
  /// calling thread; never blocks on the network.
  std::error_code try_send(peer_id to, message& m, errc absent) {
    if (announced_payload(m.header) != m.payload.size()) {
      assert(false && "diloco::tcp: the payload size must be what the header announces");
      return std::make_error_code(std::errc::invalid_argument);
    }
    const std::uint64_t bytes = wire::header_size + m.payload.size();
    {
      std::lock_guard lock(mutex_);
      if (auto ec = admit(to, bytes, absent).second) return ec;
    }
    outgoing o;
    wire::encode_header(m.header, m.payload.bytes(), o.header);
    connection_ptr c;
    bool start_writing = false;
    {
      std::lock_guard lock(mutex_);
      auto [found, ec] = admit(to, bytes, absent);
      if (ec) return ec;
      c = std::move(found);
      o.payload = std::move(m.payload);
      c->queue.push_back(std::move(o));
      c->queued_bytes += bytes;
      start_writing = !c->writing;
      c->writing = true;
    }
    m = message{};
    if (start_writing) ::asio::post(io_, [this, c] { write_next(c); });
    return {};
  }

  std::optional<envelope> try_receive() {
    std::unique_lock lock(mutex_);
    return pop(lock);
  }

  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    // A day at most, so that `now + timeout` cannot overflow.
    timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::hours(24));
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, timeout, [this] { return !inbox_.empty(); });
    return pop(lock);
  }

  /// `f` is called on the I/O thread each time a message arrives into an
  /// empty receive queue; it must not block. An empty `f` removes it; once
  /// this returns, the previous handler is not running and will not run.
  void set_arrival_handler(std::function<void()> f) {
    std::lock_guard lock(handler_mutex_);
    on_arrival_ = std::move(f);
  }

  std::uint64_t receive_queue_bytes() const {
    std::lock_guard lock(mutex_);
    return inbox_bytes_;
  }
  std::size_t connections() const {
    std::lock_guard lock(mutex_);
    return connections_.size();
  }
  const buffer_pool& pool() const noexcept { return pool_; }

 private:
  static std::uint64_t weight(const envelope& e) noexcept { return wire::header_size + e.msg.payload.size(); }

  /// The connection that may take `bytes` more, or why not. Under `mutex_`.
  std::pair<connection_ptr, std::error_code> admit(peer_id to, std::uint64_t bytes, errc absent) const {
    const auto it = connections_.find(to);
    if (it == connections_.end() || !it->second->open) return {nullptr, absent};
    const auto& c = it->second;
    if (c->queued_bytes > 0 && c->queued_bytes + bytes > options_.send_queue_bytes) return {nullptr, errc::queue_full};
    return {c, {}};
  }

  std::optional<envelope> pop(std::unique_lock<std::mutex>& lock) {
    if (inbox_.empty()) return std::nullopt;
    envelope e = std::move(inbox_.front());
    inbox_.pop_front();
    inbox_bytes_ -= weight(e);
    if (!paused_.empty() && inbox_bytes_ < options_.receive_queue_bytes) {
      auto resume = std::move(paused_);
      paused_.clear();
      lock.unlock();
      ::asio::post(io_, [this, resume = std::move(resume)] {
        for (const auto& c : resume) read_header(c);
      });
    }
    return e;
  }

  void deliver(envelope e) {
    bool was_empty = false;
    {
      std::lock_guard lock(mutex_);
      was_empty = inbox_.empty();
      inbox_bytes_ += weight(e);
      inbox_.push_back(std::move(e));
    }
    arrived_.notify_all();
    if (was_empty) {
      std::lock_guard lock(handler_mutex_);
      if (on_arrival_) on_arrival_();
    }
  }

  void deliver_error(const connection_ptr& c, wire_error error) {
    envelope e;
    e.from = c->id;
    e.error = error;
    deliver(std::move(e));
  }

  /// Closes `c` (idempotent): its queued messages are dropped, sends to it
  /// fail from now on. I/O thread.
  void close(const connection_ptr& c) {
    std::deque<outgoing> dropped;
    {
      std::lock_guard lock(mutex_);
      if (!c->open) return;
      c->open = false;
      dropped.swap(c->queue);
      for (const auto& o : dropped) c->queued_bytes -= o.size();
      if (auto it = connections_.find(c->id); it != connections_.end() && it->second == c) connections_.erase(it);
    }
    written_.notify_all();
    std::error_code ignored;
    c->socket.shutdown(::asio::ip::tcp::socket::shutdown_both, ignored);
    c->socket.close(ignored);
    if (on_closed_ && !stopping_) on_closed_(c->id);
  }

  // Reading: a header, then the payload it announces, then the next header.

  void read_header(const connection_ptr& c) {
    {
      std::lock_guard lock(mutex_);
      if (!c->open) return;
      if (inbox_bytes_ > 0 && inbox_bytes_ >= options_.receive_queue_bytes) {
        paused_.push_back(c);  // resumed by `pop`
        return;
      }
    }
    ::asio::async_read(c->socket, ::asio::buffer(c->header_in),
                       [this, c](std::error_code ec, std::size_t n) { on_header(c, ec, n); });
  }

  void on_header(const connection_ptr& c, std::error_code ec, std::size_t n) {
    if (ec) {
      // A clean end of stream between two messages is no error; a part of a
      // header is.
      const bool partial = n > 0 && ec != ::asio::error::operation_aborted;
      close(c);
      if (partial) deliver_error(c, wire_error::truncated);
      return;
    }
    c->decoded = wire::decode_header(c->header_in, options_.max_payload_bytes);
    if (c->decoded.error != wire_error::none) {
      // The length of what follows is unknown: the stream is lost.
      close(c);
      return deliver_error(c, c->decoded.error);
    }
    if (c->decoded.payload_bytes == 0) return finish_message(c);
    try {
      c->payload_in = pool_.acquire(static_cast<std::size_t>(c->decoded.payload_bytes));
    } catch (const std::bad_alloc&) {
      close(c);
      return deliver_error(c, wire_error::oversized);
    }
    ::asio::async_read(c->socket, ::asio::buffer(c->payload_in.data(), c->payload_in.size()),
                       [this, c](std::error_code e, std::size_t) {
                         if (e) {
                           c->payload_in = byte_buffer{};
                           close(c);
                           if (e != ::asio::error::operation_aborted) deliver_error(c, wire_error::truncated);
                           return;
                         }
                         finish_message(c);
                       });
  }

  /// Checks the payload and delivers the message. A payload whose checksum
  /// fails is refused, but the stream is still framed: reading goes on.
  void finish_message(const connection_ptr& c) {
    byte_buffer payload = std::move(c->payload_in);
    envelope e;
    e.from = c->id;
    e.error = wire::check_payload(c->decoded, payload.bytes());
    if (e.error == wire_error::none) {
      e.msg.header = c->decoded.header;
      e.msg.payload = std::move(payload);
    }
    deliver(std::move(e));
    read_header(c);
  }

  // Writing: everything queued, header and payload buffers gathered into one
  // `async_write`, until the queue is empty.

  void write_next(const connection_ptr& c) {
    {
      std::lock_guard lock(mutex_);
      if (!c->open || c->queue.empty()) {
        c->writing = false;
        return;
      }
      const std::size_t n = std::min(c->queue.size(), max_gather);
      c->in_flight.clear();
      for (std::size_t i = 0; i < n; ++i) {
        c->in_flight.push_back(std::move(c->queue.front()));
        c->queue.pop_front();
      }
    }
    c->gather.clear();
    for (const auto& o : c->in_flight) {
      c->gather.emplace_back(o.header.data(), o.header.size());
      if (!o.payload.empty()) c->gather.emplace_back(o.payload.data(), o.payload.size());
    }
    ::asio::async_write(c->socket, c->gather, [this, c](std::error_code ec, std::size_t) { on_written(c, ec); });
  }

  void on_written(const connection_ptr& c, std::error_code ec) {
    std::uint64_t done = 0;
    for (const auto& o : c->in_flight) done += o.size();
    c->gather.clear();
    c->in_flight.clear();  // the payloads go back to their pools
    {
      std::lock_guard lock(mutex_);
      c->queued_bytes -= done;
      if (ec) c->writing = false;
    }
    written_.notify_all();
    if (ec) return close(c);
    write_next(c);
  }

  // Declared first, destroyed last: the sockets and timers below and in the
  // owner belong to it.
  ::asio::io_context io_{1};
  ::asio::executor_work_guard<::asio::io_context::executor_type> work_{io_.get_executor()};
  socket_options options_;
  buffer_pool pool_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;  ///< a message joined the receive queue
  std::condition_variable written_;  ///< a write finished or a connection closed
  std::map<peer_id, connection_ptr> connections_;
  std::deque<envelope> inbox_;
  std::uint64_t inbox_bytes_ = 0;
  std::vector<connection_ptr> paused_;  ///< connections not read while the receive queue is full
  std::mutex handler_mutex_;
  std::function<void()> on_arrival_;
  std::function<void(peer_id)> on_closed_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace detail

/// The syncer's endpoint: listens on `address:port` (port 0 picks a free one;
/// see `port()`), accepts any number of connections, and makes each one a
/// peer: ids 1, 2, 3, … in accept order. A learner that reconnects is a new
/// peer. `try_send` to a peer whose connection closed fails with
/// `errc::unknown_peer`. A blocking transport; `try_send`, `try_receive` and
/// `receive_for` are thread-safe. Owns one I/O thread.
class server {
 public:
  /// Binds and listens; throws `std::system_error` if it cannot (e.g. the
  /// port is in use).
  server(const ::asio::ip::tcp::endpoint& at, socket_options options = {})
      : core_(options), acceptor_(core_.context()), retry_(core_.context()) {
    acceptor_.open(at.protocol());
    acceptor_.set_option(::asio::socket_base::reuse_address(true));
    acceptor_.bind(at);
    acceptor_.listen();
    endpoint_ = acceptor_.local_endpoint();
    ::asio::post(core_.context(), [this] { accept(); });
    core_.start();
  }

  server(const std::string& address, std::uint16_t port, socket_options options = {})
      : server(::asio::ip::tcp::endpoint(::asio::ip::make_address(address), port), options) {}

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Waits up to `linger` for queued messages, then closes the listener and
  /// every connection and joins the I/O thread.
  ~server() {
    core_.stop([this] {
      std::error_code ignored;
      acceptor_.close(ignored);
      retry_.cancel();
    });
  }

  /// The bound address and port.
  const ::asio::ip::tcp::endpoint& endpoint() const noexcept { return endpoint_; }
  std::uint16_t port() const noexcept { return endpoint_.port(); }

  /// Queues `m` for peer `to` without blocking. Fails with
  /// `errc::unknown_peer` (no such connection, or it closed) or
  /// `errc::queue_full` (past `send_queue_bytes`); `m` is intact then.
  std::error_code try_send(peer_id to, message& m) { return core_.try_send(to, m, errc::unknown_peer); }

  std::optional<envelope> try_receive() { return core_.try_receive(); }

  /// Sleeps on a condition variable until a message arrives or `timeout` passes.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) { return core_.receive_for(timeout); }

  /// `f` runs on the I/O thread whenever a message arrives into an empty
  /// receive queue (`serve` wakes its loop with it); it must not block.
  void set_arrival_handler(std::function<void()> f) { core_.set_arrival_handler(std::move(f)); }

  /// Open connections.
  std::size_t connections() const { return core_.connections(); }
  /// Bytes of received messages waiting for `try_receive`.
  std::uint64_t receive_queue_bytes() const { return core_.receive_queue_bytes(); }
  /// Where received payloads come from.
  const buffer_pool& pool() const noexcept { return core_.pool(); }

 private:
  void accept() {
    acceptor_.async_accept([this](std::error_code ec, ::asio::ip::tcp::socket socket) {
      if (core_.stopping() || ec == ::asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors or memory: try again shortly instead of spinning.
        retry_.expires_after(std::chrono::milliseconds(50));
        retry_.async_wait([this](std::error_code e) {
          if (!e && !core_.stopping()) accept();
        });
        return;
      }
      core_.adopt(std::move(socket), next_peer_++);
      accept();
    });
  }

  detail::io_core core_;
  ::asio::ip::tcp::acceptor acceptor_;
  ::asio::steady_timer retry_;
  ::asio::ip::tcp::endpoint endpoint_;
  peer_id next_peer_ = 1;  ///< I/O thread only
};

/// A learner's endpoint: connects to the syncer at `host:port` (a numeric
/// address or a name to resolve) and reconnects by itself when the
/// connection drops or cannot be made, after `reconnect_interval`, doubling
/// up to `reconnect_interval_max` while attempts fail. Messages queue only on
/// a live connection: without one `try_send` fails with `errc::queue_full`
/// and the caller keeps the message (like ZeroMQ's `ZMQ_IMMEDIATE`).
/// Messages still queued when a connection dies are lost. A blocking
/// transport; `try_send`, `try_receive` and `receive_for` are thread-safe.
/// Owns one I/O thread.
class client {
 public:
  client(std::string host, std::uint16_t port, socket_options options = {})
      : core_(options),
        host_(std::move(host)),
        port_(port),
        resolver_(core_.context()),
        timer_(core_.context()),
        delay_(options.reconnect_interval) {
    core_.on_closed([this](peer_id) { retry_after(core_.options().reconnect_interval); });
    ::asio::post(core_.context(), [this] { connect(); });
    core_.start();
  }

  client(const ::asio::ip::tcp::endpoint& syncer, socket_options options = {})
      : client(syncer.address().to_string(), syncer.port(), options) {}

  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Waits up to `linger` for queued messages, then closes the connection and
  /// joins the I/O thread.
  ~client() {
    core_.stop([this] {
      std::error_code ignored;
      resolver_.cancel();
      timer_.cancel();
      if (attempt_) attempt_->close(ignored);
    });
  }

  /// Queues `m` for the syncer (`to` must be `syncer_peer`, else
  /// `errc::unknown_peer`) without blocking. Fails with `errc::queue_full`
  /// while disconnected or past `send_queue_bytes`; `m` is intact then.
  std::error_code try_send(peer_id to, message& m) {
    if (to != syncer_peer) return errc::unknown_peer;
    return core_.try_send(syncer_peer, m, errc::queue_full);
  }

  std::optional<envelope> try_receive() { return core_.try_receive(); }

  /// Sleeps on a condition variable until a message arrives or `timeout` passes.
  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) { return core_.receive_for(timeout); }

  /// `f` runs on the I/O thread whenever a message arrives into an empty
  /// receive queue; it must not block.
  void set_arrival_handler(std::function<void()> f) { core_.set_arrival_handler(std::move(f)); }

  /// Whether a connection is up now.
  bool connected() const { return core_.connections() != 0; }
  /// Connections made so far (each reconnection counts). A learner whose
  /// connection was replaced is a new peer to the syncer.
  std::uint64_t connects() const noexcept { return connects_.load(); }
  std::uint64_t receive_queue_bytes() const { return core_.receive_queue_bytes(); }
  const buffer_pool& pool() const noexcept { return core_.pool(); }

 private:
  using tcp = ::asio::ip::tcp;

  // All below run on the I/O thread.

  void connect() {
    if (core_.stopping()) return;
    std::error_code ec;
    const auto address = ::asio::ip::make_address(host_, ec);
    if (!ec) return attempt(std::vector<tcp::endpoint>{tcp::endpoint(address, port_)});
    resolver_.async_resolve(host_, std::to_string(port_),
                            [this](std::error_code e, const tcp::resolver::results_type& found) {
                              if (core_.stopping() || e == ::asio::error::operation_aborted) return;
                              if (e || found.empty()) return failed();
                              attempt(std::vector<tcp::endpoint>(found.begin(), found.end()));
                            });
  }

  void attempt(std::vector<tcp::endpoint> endpoints) {
    auto socket = std::make_shared<tcp::socket>(core_.context());
    attempt_ = socket;
    timer_.expires_after(core_.options().connect_timeout);
    timer_.async_wait([socket](std::error_code e) {
      std::error_code ignored;
      if (!e) socket->close(ignored);  // the attempt then fails with operation_aborted
    });
    ::asio::async_connect(*socket, endpoints, [this, socket](std::error_code e, const tcp::endpoint&) {
      timer_.cancel();
      attempt_.reset();
      if (core_.stopping()) return;
      if (e) return failed();
      delay_ = core_.options().reconnect_interval;
      ++connects_;
      core_.adopt(std::move(*socket), syncer_peer);
    });
  }

  void failed() {
    const auto wait = delay_;
    delay_ = std::min(delay_ * 2, core_.options().reconnect_interval_max);
    retry_after(wait);
  }

  void retry_after(std::chrono::milliseconds wait) {
    timer_.expires_after(wait);
    timer_.async_wait([this](std::error_code e) {
      if (!e && !core_.stopping()) connect();
    });
  }

  detail::io_core core_;
  std::string host_;
  std::uint16_t port_;
  tcp::resolver resolver_;
  ::asio::steady_timer timer_;  ///< the connect timeout, or the wait before the next attempt
  std::shared_ptr<tcp::socket> attempt_;
  std::chrono::milliseconds delay_;  ///< the wait after the next failed attempt
  std::atomic<std::uint64_t> connects_{0};
};

static_assert(blocking_transport<server>);
static_assert(blocking_transport<client>);

namespace detail {

/// Drives a syncer from one thread with its own `io_context`: the server's
/// I/O thread posts a wake-up when messages arrive, and a `steady_timer`
/// fires at the deadline the syncer's `poll` returns.
template <class Syncer>
class syncer_driver {
 public:
  /// Messages handled before the syncer's deadlines are checked again.
  static constexpr int batch = 64;

  explicit syncer_driver(Syncer& s) : syncer_(s), transport_(s.transport()) {}
  syncer_driver(const syncer_driver&) = delete;
  syncer_driver& operator=(const syncer_driver&) = delete;
  ~syncer_driver() { transport_.set_arrival_handler({}); }

  void run(std::stop_token stop) {
    transport_.set_arrival_handler([this] { ::asio::post(io_, [this] { drain(); }); });
    ::asio::post(io_, [this] { drain(); });
    {
      std::stop_callback on_stop(stop, [this] { io_.stop(); });
      io_.run();
    }
    transport_.set_arrival_handler({});
    while (auto rest = transport_.try_receive()) syncer_.handle(std::move(*rest), clock::now());
    syncer_.flush(clock::now());
  }

 private:
  void drain() {
    int handled = 0;
    for (; handled < batch; ++handled) {
      auto e = transport_.try_receive();
      if (!e) break;
      syncer_.handle(std::move(*e), clock::now());
    }
    // A full batch may leave more behind: come back after the timers.
    if (handled == batch) ::asio::post(io_, [this] { drain(); });
    arm();
  }

  void arm() {
    const auto next = syncer_.poll(clock::now());
    if (next == armed_) return;
    armed_ = next;
    if (!next) {
      timer_.cancel();
      return;
    }
    timer_.expires_at(*next);
    timer_.async_wait([this](std::error_code ec) {
      if (ec) return;
      armed_.reset();
      arm();
    });
  }

  Syncer& syncer_;
  server& transport_;
  ::asio::io_context io_{1};
  ::asio::executor_work_guard<::asio::io_context::executor_type> work_{io_.get_executor()};
  ::asio::steady_timer timer_{io_};
  std::optional<time_point> armed_;
};

}  // namespace detail

/// Serves `s` (a `diloco::syncer` whose transport is a `tcp::server`) on the
/// calling thread until `stop` is requested: handles every message as it
/// arrives and calls `poll` at the deadlines it returns (grace windows,
/// heartbeat expiry) with an Asio timer, sleeping in between; never
/// busy-waits. At stop it handles what has already arrived, then flushes the
/// open rounds (like `syncer::run`).
template <class Syncer>
  requires std::is_same_v<std::remove_cvref_t<decltype(std::declval<Syncer&>().transport())>, server>
void serve(Syncer& s, std::stop_token stop) {
  detail::syncer_driver<Syncer> driver(s);
  driver.run(std::move(stop));
}

}  // namespace diloco::tcp
