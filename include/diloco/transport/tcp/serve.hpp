// diloco::tcp::serve: runs a syncer on a `tcp::server` from one thread,
// sleeping on Asio timers until a message arrives or a deadline of the
// syncer's is due.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <optional>
#include <stop_token>
#include <system_error>
#include <type_traits>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/transport/tcp/server.hpp"

namespace diloco::tcp {

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
