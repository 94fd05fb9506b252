// A minimal `diloco::blocking_transport` (docs/concepts/transport.md): the
// two ends of an in-process link, each with a bounded inbox guarded by a
// mutex, so that a learner thread and a syncer thread can share it.
// `receive_for` sleeps on a condition variable instead of polling. `main`
// sends, fills an inbox, and receives from another thread.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include <diloco/concepts/transport.hpp>
#include <diloco/error.hpp>

class link_end {
 public:
  link_end(diloco::peer_id self, std::size_t capacity) : self_(self), capacity_(capacity) {}
  link_end(const link_end&) = delete;  // the runtime holds a reference: it never copies a transport
  link_end& operator=(const link_end&) = delete;

  friend void connect(link_end& a, link_end& b) {
    a.peer_ = &b;
    b.peer_ = &a;
  }

  std::error_code try_send(diloco::peer_id to, diloco::message& m) {
    if (peer_ == nullptr || to != peer_->self_) return diloco::errc::unknown_peer;
    {
      std::lock_guard lock(peer_->mutex_);
      if (peer_->inbox_.size() == peer_->capacity_) return diloco::errc::queue_full;  // m intact: retry later
      peer_->inbox_.push_back(diloco::envelope{self_, std::move(m)});
    }
    peer_->arrived_.notify_one();
    return {};
  }

  std::optional<diloco::envelope> try_receive() {
    std::lock_guard lock(mutex_);
    return pop();
  }

  std::optional<diloco::envelope> receive_for(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, timeout, [this] { return !inbox_.empty(); });
    return pop();
  }

 private:
  std::optional<diloco::envelope> pop() {  // with mutex_ held
    if (inbox_.empty()) return std::nullopt;
    diloco::envelope e = std::move(inbox_.front());
    inbox_.pop_front();
    return e;
  }

  diloco::peer_id self_;
  std::size_t capacity_;
  link_end* peer_ = nullptr;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<diloco::envelope> inbox_;
};

static_assert(diloco::check_blocking_transport<link_end>());

diloco::message heartbeat(std::uint64_t sequence) {
  diloco::message m;
  m.header.kind = diloco::message_kind::heartbeat;
  m.header.learner = 7;
  m.header.sequence = sequence;
  return m;
}

int main() {
  link_end learner(7, 2), syncer(diloco::syncer_peer, 2);
  connect(learner, syncer);

  bool ok = !syncer.try_receive();  // nothing sent yet
  for (std::uint64_t s = 1; s <= 2; ++s) {
    diloco::message m = heartbeat(s);
    ok = ok && !learner.try_send(diloco::syncer_peer, m);
  }
  diloco::message third = heartbeat(3);
  ok = ok && learner.try_send(diloco::syncer_peer, third) == diloco::errc::queue_full;
  ok = ok && third.header.sequence == 3;  // refused, not moved from
  ok = ok && learner.try_send(42, third) == diloco::errc::unknown_peer;
  for (std::uint64_t s = 1; s <= 2; ++s) {
    const auto e = syncer.try_receive();
    ok = ok && e && e->from == 7 && e->msg.header.sequence == s;
  }

  std::jthread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    learner.try_send(diloco::syncer_peer, third);
  });
  const auto late = syncer.receive_for(std::chrono::seconds(10));  // wakes when the message arrives
  ok = ok && late && late->msg.header.sequence == 3;
  std::printf("%s\n", ok ? "delivered in order, refused when full, woken on arrival" : "failed");
  return ok ? 0 : 1;
}
