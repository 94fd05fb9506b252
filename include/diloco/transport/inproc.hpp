// The in-process transport: learners and the syncer as threads of one process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco::inproc {

/// Limits of every endpoint's receive queue.
struct hub_options {
  std::size_t queue_bytes = std::size_t{1} << 30;  ///< payload bytes waiting at one endpoint
  std::size_t queue_messages = 1 << 16;            ///< messages waiting at one endpoint
};

class hub;

namespace detail {

struct mailbox {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<envelope> queue;
  std::size_t bytes = 0;
  bool closed = false;
};

}  // namespace detail

/// One attached peer. `try_send` and `try_receive` never block;
/// `receive_for` sleeps on a condition variable. Safe to use from one thread
/// while other endpoints are used from others.
class endpoint {
 public:
  peer_id id() const noexcept { return id_; }

  /// Moves `m` into the receiver's queue. Fails with `errc::unknown_peer` if
  /// nobody is attached as `to`, `errc::closed` if it is closed, and
  /// `errc::queue_full` if its queue is at a limit; `m` is intact then.
  std::error_code try_send(peer_id to, message& m);

  std::optional<envelope> try_receive() {
    std::lock_guard lock(box_->mutex);
    return pop_locked();
  }

  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(box_->mutex);
    box_->ready.wait_for(lock, timeout, [&] { return !box_->queue.empty() || box_->closed; });
    return pop_locked();
  }

  /// Rejects further messages to this endpoint and wakes a waiting receiver.
  void close() {
    {
      std::lock_guard lock(box_->mutex);
      box_->closed = true;
    }
    box_->ready.notify_all();
  }

 private:
  friend class hub;
  endpoint(hub& h, peer_id id) : hub_(&h), id_(id), box_(std::make_shared<detail::mailbox>()) {}

  std::optional<envelope> pop_locked() {
    if (box_->queue.empty()) return std::nullopt;
    envelope e = std::move(box_->queue.front());
    box_->queue.pop_front();
    box_->bytes -= e.msg.payload.size();
    return e;
  }

  hub* hub_;
  peer_id id_;
  std::shared_ptr<detail::mailbox> box_;
};

/// Connects endpoints of one process. Endpoints live as long as the hub;
/// attaching a peer id twice throws.
class hub {
 public:
  explicit hub(hub_options options = {}) : options_(options) {}
  hub(const hub&) = delete;
  hub& operator=(const hub&) = delete;

  /// The endpoint for `id`; throws `std::invalid_argument` if `id` is taken.
  endpoint& attach(peer_id id) {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = endpoints_.try_emplace(id, nullptr);
    if (!inserted)
      throw std::invalid_argument("diloco::inproc::hub: peer " + std::to_string(id) + " is already attached");
    it->second.reset(new endpoint(*this, id));
    return *it->second;
  }

  const hub_options& options() const noexcept { return options_; }

 private:
  friend class endpoint;

  std::shared_ptr<detail::mailbox> find(peer_id id) {
    std::lock_guard lock(mutex_);
    auto it = endpoints_.find(id);
    return it == endpoints_.end() ? nullptr : it->second->box_;
  }

  hub_options options_;
  std::mutex mutex_;
  std::map<peer_id, std::unique_ptr<endpoint>> endpoints_;
};

inline std::error_code endpoint::try_send(peer_id to, message& m) {
  auto box = hub_->find(to);
  if (!box) return errc::unknown_peer;
  {
    std::lock_guard lock(box->mutex);
    if (box->closed) return errc::closed;
    const auto& limits = hub_->options();
    if (box->queue.size() >= limits.queue_messages || box->bytes + m.payload.size() > limits.queue_bytes)
      return errc::queue_full;
    box->bytes += m.payload.size();
    box->queue.push_back(envelope{id_, std::move(m)});
  }
  box->ready.notify_one();
  return {};
}

static_assert(blocking_transport<endpoint>);

}  // namespace diloco::inproc
