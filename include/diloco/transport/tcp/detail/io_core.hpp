// The I/O core that diloco::tcp's `server` and `client` share: one I/O thread,
// the connections with their send queues, and the receive queue, reading and
// writing the framing of docs/protocol.md ("Framing", TCP).
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "diloco/error.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/transport/detail/memory_budget.hpp"
#include "diloco/transport/tcp/detail/connection.hpp"
#include "diloco/transport/tcp/options.hpp"

namespace diloco::tcp::detail {

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
      use_.outbound.fetch_add(bytes, std::memory_order_relaxed);
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
  /// What the memory budget counts (`socket_options::memory_bytes`).
  const diloco::detail::memory_use& memory() const noexcept { return use_; }
  std::size_t connections() const {
    std::lock_guard lock(mutex_);
    return connections_.size();
  }
  const buffer_pool& pool() const noexcept { return pool_; }

 private:
  static std::uint64_t weight(const envelope& e) noexcept { return wire::header_size + e.msg.payload.size(); }

  /// The connection that may take `bytes` more, or why not: its own queue
  /// limit, then the endpoint's memory budget. Under `mutex_`.
  std::pair<connection_ptr, std::error_code> admit(peer_id to, std::uint64_t bytes, errc absent) {
    const auto it = connections_.find(to);
    if (it == connections_.end() || !it->second->open) return {nullptr, absent};
    const auto& c = it->second;
    if (c->queued_bytes > 0 && c->queued_bytes + bytes > options_.send_queue_bytes) return {nullptr, errc::queue_full};
    if (!diloco::detail::admit_send(use_, options_.memory_bytes, c->queued_bytes, bytes))
      return {nullptr, errc::queue_full};
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
      for (const auto& o : dropped) {
        c->queued_bytes -= o.size();
        use_.outbound.fetch_sub(o.size(), std::memory_order_relaxed);
      }
      if (auto it = connections_.find(c->id); it != connections_.end() && it->second == c) connections_.erase(it);
    }
    written_.notify_all();
    unfinished_.forget(c->id);  // its buffer is freed when its pending read ends
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
    if (ec || !c->open) {
      // A clean end of stream between two messages is no error; a part of a
      // header is.
      const bool partial = ec && n > 0 && ec != ::asio::error::operation_aborted;
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
    c->received = 0;
    try {
      c->payload_in = first_buffer(c->decoded.payload_bytes);
    } catch (const std::bad_alloc&) {
      close(c);
      return deliver_error(c, wire_error::oversized);
    }
    advanced(c);
    read_payload(c);
  }

  /// The buffer of a payload of `total` bytes, nothing of it read yet: a
  /// pooled one that fits it whole when one is cached and the budget has
  /// room for it (its pages are resident already: the steady state of
  /// honest traffic, nothing copied), else one for the first piece
  /// (`read_piece_bytes`), grown by `read_payload` as bytes arrive.
  byte_buffer first_buffer(std::uint64_t total) {
    const std::uint64_t held = use_.held() + diloco::detail::unfinished_entry_bytes;
    const std::uint64_t limit = options_.memory_bytes;
    if (held < limit && total <= limit - held) {
      auto cached = pool_.acquire_cached(static_cast<std::size_t>(total), static_cast<std::size_t>(limit - held));
      if (cached.data()) return cached;
    }
    return fitting(std::min<std::uint64_t>(total, read_piece_bytes));
  }

  /// A buffer of exactly the capacity a fresh one for `bytes` would have,
  /// from the pool if it holds one: what a message holds stays what has
  /// arrived, however large the blocks the pool caches.
  byte_buffer fitting(std::uint64_t bytes) {
    const auto n = static_cast<std::size_t>(bytes);
    return pool_.acquire(n, diloco::detail::capacity_for(n));
  }

  /// Reads the next piece of `c`'s payload: what is available, up to
  /// `read_piece_bytes`, into its buffer, first doubling the buffer (at most
  /// to the payload size; what has arrived is copied) when it is full.
  /// Doubling copies each byte at most once more on average, and only when
  /// no pooled buffer fitted the whole payload.
  void read_payload(const connection_ptr& c) {
    const std::uint64_t total = c->decoded.payload_bytes;
    if (c->payload_in.capacity() == c->received) {
      try {
        const auto capacity = diloco::detail::grown_capacity(c->received, c->received + 1, total);
        auto bigger = fitting(capacity);
        std::memcpy(bigger.data(), c->payload_in.data(), static_cast<std::size_t>(c->received));
        c->payload_in = std::move(bigger);
      } catch (const std::bad_alloc&) {
        c->payload_in = byte_buffer{};
        close(c);
        return deliver_error(c, wire_error::oversized);
      }
      advanced(c);
    }
    const std::size_t room = static_cast<std::size_t>(
        std::min<std::uint64_t>({c->payload_in.capacity() - c->received, total - c->received, read_piece_bytes}));
    c->socket.async_read_some(::asio::buffer(c->payload_in.data() + c->received, room),
                              [this, c](std::error_code e, std::size_t n) { on_payload(c, e, n); });
  }

  void on_payload(const connection_ptr& c, std::error_code ec, std::size_t n) {
    if (ec || !c->open) {
      // Closed meanwhile (evicted for the budget, or shutting down): its
      // refusal, if any, is delivered already.
      const bool refused = !c->open || ec == ::asio::error::operation_aborted;
      c->payload_in = byte_buffer{};
      close(c);
      if (!refused) deliver_error(c, wire_error::truncated);
      return;
    }
    c->received += n;
    if (c->received < c->decoded.payload_bytes) {
      advanced(c);
      return read_payload(c);
    }
    unfinished_.forget(c->id);
    c->payload_in.resize(static_cast<std::size_t>(c->received));
    finish_message(c);
  }

  /// `c`'s unfinished message advanced: counts what it holds, then closes
  /// the connections whose messages advanced least recently while the
  /// endpoint holds more than `memory_bytes`, refusing each message once.
  void advanced(const connection_ptr& c) {
    unfinished_.advanced(c->id, c->payload_in.capacity() + diloco::detail::unfinished_entry_bytes);
    std::vector<peer_id> victims;
    unfinished_.evict(c->id, [&victims](peer_id victim) -> std::uint64_t {
      victims.push_back(victim);
      return 0;
    });
    for (const peer_id victim : victims) {
      connection_ptr v;
      {
        std::lock_guard lock(mutex_);
        if (const auto it = connections_.find(victim); it != connections_.end()) v = it->second;
      }
      if (!v) continue;
      use_.evicted.fetch_add(1, std::memory_order_relaxed);
      close(v);  // its pending read ends with operation_aborted and frees its buffer
      deliver_error(v, wire_error::over_budget);
    }
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
      use_.outbound.fetch_sub(done, std::memory_order_relaxed);
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
  diloco::detail::memory_use use_;
  diloco::detail::unfinished_messages<peer_id> unfinished_{use_, options_.memory_bytes};  ///< I/O thread only
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

}  // namespace diloco::tcp::detail
