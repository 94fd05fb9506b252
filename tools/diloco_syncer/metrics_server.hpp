// The syncer's counters over HTTP for a Prometheus scraper: a server of one
// page on 127.0.0.1 only, on standalone Asio with an io_context and a thread
// of its own. The syncer publishes the latest text (`publish`, a string
// swapped under a mutex); the server's thread answers each request with it.
// At most `max_connections` clients at a time, each bounded in size (8 KiB
// of request) and time (2 s from its accept to the end of the answer, then
// it is closed), so a slow or hostile client never delays the syncer, and
// other scrapes by 2 s at most (only while such clients hold every place).
// Destruction stops the thread and closes every connection.
//
// Built without Asio (DILOCO_SYNCER_WITHOUT_ASIO), `available` is false and
// the constructor throws: diloco_syncer then refuses --metrics-port.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>

#ifndef DILOCO_SYNCER_WITHOUT_ASIO
#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <system_error>
#include <thread>

#include <asio/buffer.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#endif

namespace diloco_syncer {

#ifndef DILOCO_SYNCER_WITHOUT_ASIO

class metrics_server {
 public:
  static constexpr bool available = true;
  static constexpr std::size_t max_request = 8192;
  static constexpr std::chrono::milliseconds request_timeout{2000};
  static constexpr std::size_t max_connections = 8;

  /// Listens on 127.0.0.1:`port` (0: a free port, see `port()`). Throws
  /// `std::runtime_error` when the port cannot be bound.
  explicit metrics_server(std::uint16_t port) : acceptor_(io_), retry_(io_) {
    const asio::ip::tcp::endpoint at(asio::ip::address_v4::loopback(), port);
    std::error_code ec;
    acceptor_.open(at.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(16, ec);
    if (ec)
      throw std::runtime_error("metrics: cannot listen on 127.0.0.1:" + std::to_string(port) + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  /// Stops the server's thread; open connections are closed with the
  /// io_context, answered or not.
  ~metrics_server() {
    io_.stop();
    thread_.join();
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
  /// One client: its socket, its deadline, what it sent and what it gets.
  struct connection {
    explicit connection(asio::ip::tcp::socket s) : socket(std::move(s)), deadline(socket.get_executor()) {}
    asio::ip::tcp::socket socket;
    asio::steady_timer deadline;
    std::array<char, 1024> chunk{};
    std::string request, response;
    bool page = false;  ///< answered with the page (200)
  };

  // Everything below runs on the server's thread.

  void accept() {
    acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {  // out of descriptors, most likely: try again in 100 ms rather than spin
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](std::error_code e) {
          if (!e) accept();
        });
        return;
      }
      serve(std::make_shared<connection>(std::move(socket)));
      if (open_ < max_connections)
        accept();
      else
        accept_when_one_closes_ = true;
    });
  }

  void serve(std::shared_ptr<connection> c) {
    ++open_;
    c->deadline.expires_after(request_timeout);
    c->deadline.async_wait([c](std::error_code ec) {
      if (ec) return;  // cancelled: the connection ended in time
      std::error_code ignored;
      c->socket.close(ignored);  // its pending read or write ends with an error, which finishes it
    });
    read(std::move(c));
  }

  /// Reads until the end of the request's head (an empty line), at most
  /// `max_request` bytes.
  void read(std::shared_ptr<connection> c) {
    const std::size_t room = std::min(c->chunk.size(), max_request - c->request.size());
    c->socket.async_read_some(asio::buffer(c->chunk.data(), room), [this, c](std::error_code ec, std::size_t n) {
      c->request.append(c->chunk.data(), n);
      const bool head = c->request.find("\r\n\r\n") != std::string::npos ||
                        c->request.find("\n\n") != std::string::npos || ec == asio::error::eof;
      if (head) return respond(c);
      if (ec || c->request.size() >= max_request) return finish(c);  // cut off, reset, or too long: closed
      read(c);
    });
  }

  void respond(std::shared_ptr<connection> c) {
    c->response = answer(c->request, c->page);
    asio::async_write(c->socket, asio::buffer(c->response), [this, c](std::error_code ec, std::size_t) {
      if (!ec && c->page) ++served_;
      finish(c);
    });
  }

  void finish(const std::shared_ptr<connection>& c) {
    std::error_code ignored;
    c->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    c->socket.close(ignored);
    c->deadline.cancel();
    --open_;
    if (accept_when_one_closes_) {
      accept_when_one_closes_ = false;
      accept();
    }
  }

  /// The HTTP/1.0 answer to `request`: the page for GET /metrics or GET /,
  /// 404 for another path, 405 for another method.
  std::string answer(std::string_view request, bool& page) {
    const std::string_view line = request.substr(0, request.find_first_of("\r\n"));
    const bool get = line.starts_with("GET ");
    const std::string_view path = get ? line.substr(4, line.find(' ', 4) - 4) : std::string_view();
    std::string status, body, type = "text/plain; charset=utf-8";
    page = false;
    if (!get) {
      status = "405 Method Not Allowed";
      body = "only GET\n";
    } else if (path != "/metrics" && path != "/") {
      status = "404 Not Found";
      body = "the counters are at /metrics\n";
    } else {
      status = "200 OK";
      type = "text/plain; version=0.0.4; charset=utf-8";
      page = true;
      std::lock_guard lock(mutex_);
      body = page_;
    }
    return "HTTP/1.0 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
  }

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::uint16_t port_ = 0;
  std::size_t open_ = 0;                 ///< connections being served
  bool accept_when_one_closes_ = false;  ///< `max_connections` reached: accepting paused
  std::mutex mutex_;
  std::string page_;
  std::atomic<std::uint64_t> served_{0};
  std::thread thread_;
};

#else

/// Stands in for the server in a diloco_syncer built without Asio.
class metrics_server {
 public:
  static constexpr bool available = false;
  explicit metrics_server(std::uint16_t) {
    throw std::runtime_error("metrics: this diloco_syncer was built without standalone Asio (Debian: libasio-dev)");
  }
  std::uint16_t port() const noexcept { return 0; }
  void publish(std::string) {}
  std::uint64_t served() const noexcept { return 0; }
};

#endif

}  // namespace diloco_syncer
