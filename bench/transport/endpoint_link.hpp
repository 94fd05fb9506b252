// The benchmark's use of a diloco transport, the same for all of them: the
// sender is a learner's endpoint, the receiver the syncer's. Messages are
// `contribution`s whose payloads come from a `buffer_pool` and go through
// `try_send` (retried after a short sleep on `errc::queue_full`); the
// receiver takes them with `receive_for` and drops them, which returns each
// payload to the pool it came from.
#pragma once

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <diloco/error.hpp>
#include <diloco/protocol/buffer.hpp>
#include <diloco/protocol/message.hpp>

#include "bench.hpp"

namespace bench {

/// Holds nothing but references: the derived class owns the endpoints (and
/// whatever they need) and calls `connect` once they exist.
template <class Sender, class Receiver>
class endpoint_link : public link {
 public:
  /// The pool holds as many blocks as the sender's queue budget can keep in
  /// flight, each written once before anything is measured, as a learner's
  /// pool is at steady state and as a raw socket reuses its one buffer:
  /// otherwise a deep queue of small messages measured mostly the page
  /// faults of fresh blocks (10 % of the time at 1 MiB).
  endpoint_link(const link_options& o, const char* name)
      : size_(o.payload_bytes),
        name_(name),
        pool_(o.queue_bytes / std::max<std::size_t>(1, o.payload_bytes) + 4, o.queue_bytes + 4 * o.payload_bytes) {
    if (size_ % sizeof(float) != 0) fail("payload sizes must be whole fp32 elements");
    std::vector<diloco::byte_buffer> blocks;
    for (std::size_t i = 0; i < o.queue_bytes / std::max<std::size_t>(1, size_) + 4; ++i) {
      blocks.push_back(pool_.acquire(size_));
      std::memset(blocks.back().data(), 0x5a, size_);
      written_.insert(blocks.back().data());
    }
  }

  stream_result stream(const stream_limits& limits) override {
    stream_result r;
    std::string error;
    clock::time_point end;
    std::thread receiver([&] {
      try {
        for (;;) {
          const auto e = rx_->receive_for(std::chrono::seconds(10));
          if (!e) fail(std::string(name_) + ": no message for 10 s");
          check(*e);
          ++r.messages;
          r.payload_bytes += e->msg.payload.size();
          if (e->msg.header.flags & diloco::final_contribution) break;
        }
        end = clock::now();
      } catch (const std::exception& ex) {
        error = ex.what();
      }
    });
    const auto start = clock::now();
    try {
      for (std::uint64_t sequence = 0;; ++sequence) {
        const bool last = sequence + 1 >= limits.min_messages && since(start) >= limits.seconds;
        auto m = contribution(sequence, last);
        send(*tx_, to_rx_, m);
        if (last) break;
      }
    } catch (...) {
      receiver.join();  // gives up within its 10 s bound
      throw;
    }
    receiver.join();
    if (!error.empty()) fail(error);
    r.seconds = std::chrono::duration<double>(end - start).count();
    return r;
  }

  void ping_pong(double seconds, int min_trips, int max_trips, std::vector<double>& rtt_us) override {
    std::atomic<bool> stop{false};
    std::string error;
    std::thread echo([&] {
      try {
        while (!stop.load()) {
          auto e = rx_->receive_for(std::chrono::milliseconds(20));
          if (!e) continue;
          check(*e);
          diloco::message back = std::move(e->msg);  // the same payload goes back
          send(*rx_, to_tx_, back);
        }
      } catch (const std::exception& ex) {
        error = ex.what();
      }
    });
    const auto start = clock::now();
    try {
      for (int trip = 0; trip < max_trips && (trip < min_trips || since(start) < seconds); ++trip) {
        auto m = contribution(static_cast<std::uint64_t>(trip), false);
        const auto t0 = clock::now();
        send(*tx_, to_rx_, m);
        const auto back = tx_->receive_for(std::chrono::seconds(10));
        if (!back) fail(std::string(name_) + ": no echo for 10 s");
        check(*back);
        rtt_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
      }
    } catch (...) {
      stop = true;
      echo.join();
      throw;
    }
    stop = true;
    echo.join();
    if (!error.empty()) fail(error);
  }

 protected:
  /// Makes the endpoints known to each other: the sender's `join`s reach the
  /// receiver (repeated until one does, for at most 10 s), which learns the
  /// sender's peer id from it. `to_rx` is how the sender addresses the receiver.
  void connect(Sender& tx, Receiver& rx, diloco::peer_id to_rx) {
    tx_ = &tx;
    rx_ = &rx;
    to_rx_ = to_rx;
    const auto end = clock::now() + std::chrono::seconds(10);
    while (clock::now() < end) {
      diloco::message join;
      join.header.kind = diloco::message_kind::join;
      join.header.learner = 1;
      join.header.incarnation = 1;
      if (auto ec = tx.try_send(to_rx, join); ec && ec != diloco::errc::queue_full)
        fail(std::string(name_) + ": join: " + ec.message());
      if (auto e = rx.receive_for(std::chrono::milliseconds(50))) {
        if (e->error != diloco::wire_error::none) fail(std::string(name_) + ": a bad join");
        to_tx_ = e->from;
        // Joins sent before the first one got through may still arrive.
        while (rx.receive_for(std::chrono::milliseconds(50))) {
        }
        return;
      }
    }
    fail(std::string(name_) + ": could not connect within 10 s");
  }

 private:
  /// A contribution of `size_` bytes from the pool. A block the pool hands
  /// out for the first time is written once, as a learner writes its
  /// payload, so that no page is faulted in by the transport's checksum.
  diloco::message contribution(std::uint64_t sequence, bool last) {
    diloco::message m;
    m.header.kind = diloco::message_kind::contribution;
    m.header.codec = diloco::codec_id::f32;
    m.header.learner = 1;
    m.header.incarnation = 1;
    m.header.sequence = sequence;
    m.header.element_count = size_ / sizeof(float);
    m.header.flags = last ? diloco::final_contribution : 0;
    m.payload = pool_.acquire(size_);
    if (written_.insert(m.payload.data()).second) std::memset(m.payload.data(), 0x5a, m.payload.size());
    std::memcpy(m.payload.data(), &sequence, std::min(sizeof sequence, m.payload.size()));
    return m;
  }

  template <class Endpoint>
  void send(Endpoint& e, diloco::peer_id to, diloco::message& m) const {
    const auto end = clock::now() + std::chrono::seconds(10);
    for (;;) {
      const auto ec = e.try_send(to, m);
      if (!ec) return;
      if (ec != diloco::errc::queue_full) fail(std::string(name_) + ": send: " + ec.message());
      if (clock::now() > end) fail(std::string(name_) + ": queue full for 10 s");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void check(const diloco::envelope& e) const {
    if (e.error != diloco::wire_error::none)
      fail(std::string(name_) + ": wire error " + std::to_string(static_cast<int>(e.error)));
    if (e.msg.payload.size() != size_) fail(std::string(name_) + ": wrong payload size");
  }

  std::size_t size_;
  const char* name_;
  Sender* tx_ = nullptr;
  Receiver* rx_ = nullptr;
  diloco::peer_id to_rx_ = 0, to_tx_ = 0;
  diloco::buffer_pool pool_;
  std::unordered_set<const std::byte*> written_;
};

}  // namespace bench
