// The syncer's counters over HTTP for a Prometheus scraper: a server of one
// page on 127.0.0.1 only, on a thread of its own. The syncer publishes the
// latest text (`publish`, a string swapped under a mutex); the server thread
// answers each request with it. One connection at a time, each bounded in
// size (8 KiB of request) and time (2 s to read the request and write the
// answer), so a slow or hostile client delays other scrapes by 2 s at most
// and never the syncer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

namespace diloco_syncer {

class metrics_server {
 public:
  static constexpr std::size_t max_request = 8192;
  static constexpr std::chrono::milliseconds request_timeout{2000};

  /// Listens on 127.0.0.1:`port` (0: a free port, see `port()`). Throws
  /// `std::runtime_error` when the port cannot be bound.
  explicit metrics_server(std::uint16_t port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listener_ < 0) throw std::runtime_error(std::string("metrics: socket: ") + std::strerror(errno));
    const int yes = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0) {
      const std::string why = std::strerror(errno);
      ::close(listener_);
      throw std::runtime_error("metrics: cannot listen on 127.0.0.1:" + std::to_string(port) + ": " + why);
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::jthread([this](std::stop_token stop) { serve(stop); });
  }

  ~metrics_server() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
  }

  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  std::uint16_t port() const noexcept { return port_; }

  /// What the next scrapes get. Never blocks beyond the swap.
  void publish(std::string text) {
    std::lock_guard lock(mutex_);
    page_.swap(text);
  }

  /// Requests answered with the page (200).
  std::uint64_t served() const noexcept { return served_.load(); }

 private:
  using clock = std::chrono::steady_clock;

  void serve(std::stop_token stop) {
    while (!stop.stop_requested()) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) {
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      answer(client, clock::now() + request_timeout);
      ::close(client);
    }
  }

  /// Waits for `events` on `fd` until `deadline`; false when it passed.
  static bool wait(int fd, short events, clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left));
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return false;
    }
  }

  void answer(int fd, clock::time_point deadline) {
    std::string request;
    char buffer[1024];
    while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
      if (request.size() >= max_request || !wait(fd, POLLIN, deadline)) return;  // too long or too slow: closed
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return;
      }
      request.append(buffer, static_cast<std::size_t>(n));
    }
    const std::string_view line = std::string_view(request).substr(0, request.find_first_of("\r\n"));
    const bool get = line.starts_with("GET ");
    const std::string_view path = get ? line.substr(4, line.find(' ', 4) - 4) : std::string_view();
    std::string status, body, type = "text/plain; charset=utf-8";
    if (!get) {
      status = "405 Method Not Allowed";
      body = "only GET\n";
    } else if (path != "/metrics" && path != "/") {
      status = "404 Not Found";
      body = "the counters are at /metrics\n";
    } else {
      status = "200 OK";
      type = "text/plain; version=0.0.4; charset=utf-8";
      std::lock_guard lock(mutex_);
      body = page_;
    }
    const std::string response = "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                                 "\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body;
    for (std::size_t sent = 0; sent < response.size();) {
      if (!wait(fd, POLLOUT, deadline)) return;
      const ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return;
      }
      sent += static_cast<std::size_t>(n);
    }
    if (status.starts_with("200")) ++served_;
  }

  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::mutex mutex_;
  std::string page_;
  std::atomic<std::uint64_t> served_{0};
  std::jthread thread_;
};

}  // namespace diloco_syncer
