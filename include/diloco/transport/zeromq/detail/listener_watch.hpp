// The ROUTER's guard against a process out of descriptors: failed accepts
// are watched through a socket monitor, and the waiting connections are shed
// so that libzmq's I/O thread does not spin (Linux).
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>

#if defined(__linux__)
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "diloco/transport/zeromq/detail/socket.hpp"

namespace diloco::zeromq::detail {

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
      : router_(router),
        events_(context, ::zmq::socket_type::pair),
        stack_(std::make_unique<std::byte[]>(stack_bytes)) {
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

}  // namespace diloco::zeromq::detail
