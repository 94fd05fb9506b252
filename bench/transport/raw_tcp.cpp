// The baseline: a raw blocking TCP socket pair on 127.0.0.1. Each message is
// a 24-byte prefix (payload length, sequence number, flags, checksum) and the
// payload, written with one writev from one reused buffer and read with
// recv into one reused buffer. No framing library, no checksum unless asked:
// with `checksum`, the sender computes the payload's CRC-32C and the receiver
// checks it, as diloco's protocol does.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <diloco/protocol/buffer.hpp>
#include <diloco/protocol/crc32c.hpp>

#include "bench.hpp"

namespace bench {
namespace {

struct prefix {
  std::uint64_t bytes = 0;
  std::uint64_t sequence = 0;
  std::uint32_t flags = 0;
  std::uint32_t crc = 0;
};
static_assert(sizeof(prefix) == 24);

constexpr std::uint32_t last_message = 1;
constexpr std::uint32_t stop_echo = 2;

[[noreturn]] void fail_errno(const char* what) { fail(std::string("raw tcp: ") + what + ": " + std::strerror(errno)); }

/// A socket descriptor, closed on destruction.
class descriptor {
 public:
  explicit descriptor(int fd = -1) : fd_(fd) {}
  descriptor(descriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  descriptor& operator=(descriptor&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

/// Every blocking call on `fd` gives up after 10 s (then the benchmark fails).
void configure(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
}

/// A connected pair on an ephemeral loopback port: {connecting side, accepted side}.
std::pair<descriptor, descriptor> connected_pair() {
  descriptor listener(::socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) fail_errno("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail_errno("bind");
  if (::listen(listener.get(), 1) != 0) fail_errno("listen");
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) fail_errno("getsockname");
  descriptor out(::socket(AF_INET, SOCK_STREAM, 0));
  if (out.get() < 0) fail_errno("socket");
  configure(out.get());
  if (::connect(out.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail_errno("connect");
  descriptor in(::accept(listener.get(), nullptr, nullptr));
  if (in.get() < 0) fail_errno("accept");
  configure(in.get());
  return {std::move(out), std::move(in)};
}

void write_all(int fd, const prefix& p, const std::byte* payload) {
  iovec parts[2] = {{const_cast<prefix*>(&p), sizeof p}, {const_cast<std::byte*>(payload), p.bytes}};
  iovec* next = parts;
  int count = p.bytes ? 2 : 1;
  while (count > 0) {
    const ssize_t n = ::writev(fd, next, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("writev");
    }
    auto left = static_cast<std::size_t>(n);
    while (count > 0 && left >= next->iov_len) {
      left -= next->iov_len;
      ++next;
      --count;
    }
    if (count > 0) {
      next->iov_base = static_cast<char*>(next->iov_base) + left;
      next->iov_len -= left;
    }
  }
}

void read_all(int fd, void* to, std::size_t bytes) {
  auto* p = static_cast<char*>(to);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n == 0) fail("raw tcp: connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("recv");
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

/// A buffer of `bytes` bytes written once, so that no page is faulted in while timing.
diloco::byte_buffer touched(std::size_t bytes) {
  diloco::byte_buffer b(bytes);
  std::memset(b.data(), 0x5a, b.size());
  return b;
}

class raw_tcp_link final : public link {
 public:
  raw_tcp_link(const link_options& o, bool checksum)
      : size_(o.payload_bytes),
        checksum_(checksum),
        send_buffer_(touched(size_)),
        receive_buffer_(touched(size_)),
        reply_buffer_(touched(size_)) {
    auto [out, in] = connected_pair();
    out_ = std::move(out);
    in_ = std::move(in);
  }

  stream_result stream(const stream_limits& limits) override {
    stream_result r;
    std::string error;
    clock::time_point end;
    std::thread receiver([&] {
      try {
        for (;;) {
          const prefix p = receive(in_.get(), receive_buffer_);
          ++r.messages;
          r.payload_bytes += p.bytes;
          if (p.flags & last_message) break;
        }
        end = clock::now();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    const auto start = clock::now();
    try {
      for (std::uint64_t sequence = 0;; ++sequence) {
        const bool last = sequence + 1 >= limits.min_messages && since(start) >= limits.seconds;
        send(out_.get(), sequence, last ? last_message : 0);
        if (last) break;
      }
    } catch (...) {
      ::shutdown(out_.get(), SHUT_RDWR);
      receiver.join();
      throw;
    }
    receiver.join();
    if (!error.empty()) fail(error);
    r.seconds = std::chrono::duration<double>(end - start).count();
    return r;
  }

  void ping_pong(double seconds, int min_trips, int max_trips, std::vector<double>& rtt_us) override {
    std::string error;
    std::thread echo([&] {
      try {
        for (;;) {
          const prefix p = receive(in_.get(), receive_buffer_);
          if (p.flags & stop_echo) break;
          prefix back = p;
          if (checksum_) back.crc = diloco::crc32c(receive_buffer_.bytes());
          write_all(in_.get(), back, receive_buffer_.data());
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    const auto start = clock::now();
    try {
      for (int trip = 0; trip < max_trips && (trip < min_trips || since(start) < seconds); ++trip) {
        const auto t0 = clock::now();
        send(out_.get(), static_cast<std::uint64_t>(trip), 0);
        (void)receive(out_.get(), reply_buffer_);
        rtt_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
      }
      prefix stop;
      stop.flags = stop_echo;
      write_all(out_.get(), stop, nullptr);
    } catch (...) {
      ::shutdown(out_.get(), SHUT_RDWR);
      echo.join();
      throw;
    }
    echo.join();
    if (!error.empty()) fail(error);
  }

 private:
  void send(int fd, std::uint64_t sequence, std::uint32_t flags) {
    std::memcpy(send_buffer_.data(), &sequence, sizeof sequence);  // each payload differs
    prefix p;
    p.bytes = size_;
    p.sequence = sequence;
    p.flags = flags;
    if (checksum_) p.crc = diloco::crc32c(send_buffer_.bytes());
    write_all(fd, p, send_buffer_.data());
  }

  prefix receive(int fd, diloco::byte_buffer& into) const {
    prefix p;
    read_all(fd, &p, sizeof p);
    if (p.flags & stop_echo) return p;
    if (p.bytes != size_) fail("raw tcp: unexpected payload size " + std::to_string(p.bytes));
    read_all(fd, into.data(), into.size());
    if (checksum_ && diloco::crc32c(into.bytes()) != p.crc) fail("raw tcp: checksum mismatch");
    return p;
  }

  std::size_t size_;
  bool checksum_;
  diloco::byte_buffer send_buffer_, receive_buffer_, reply_buffer_;
  descriptor out_, in_;
};

}  // namespace

std::unique_ptr<link> make_raw_tcp(const link_options& o, bool checksum) {
  return std::make_unique<raw_tcp_link>(o, checksum);
}

std::string check_crc32c() {
  auto bitwise = [](const unsigned char* p, std::size_t n) {
    std::uint32_t c = ~0u;
    for (std::size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    }
    return ~c;
  };
  std::vector<unsigned char> bytes(3 * 24576 + 64);
  std::uint64_t x = 0x9e3779b97f4a7c15u;
  for (auto& b : bytes) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  for (const std::size_t n : {0, 1, 7, 8, 9, 255, 767, 768, 769, 8191, 24575, 24576, 24577, 50000, 3 * 24576})
    for (std::size_t offset = 0; offset < 8; ++offset) {
      const std::span<const std::byte> data(reinterpret_cast<const std::byte*>(bytes.data() + offset), n);
      const std::uint32_t expected = bitwise(bytes.data() + offset, n);
      if (diloco::crc32c(data) != expected ||
          diloco::crc32c(data.subspan(n / 3), diloco::crc32c(data.first(n / 3))) != expected)
        return "diloco::crc32c differs from a bitwise CRC-32C over " + std::to_string(n) + " bytes at offset " +
               std::to_string(offset);
    }
  return {};
}

double crc32c_gbps(std::size_t bytes, int repeat) {
  const auto buffer = touched(bytes);
  // Enough passes per sample to time at least ~16 MiB.
  const std::size_t passes = std::max<std::size_t>(1, (std::size_t{16} << 20) / bytes);
  std::vector<double> gbps;
  volatile std::uint32_t sink = 0;
  for (int r = 0; r < repeat + 1; ++r) {
    const auto t0 = clock::now();
    std::uint32_t crc = 0;
    for (std::size_t i = 0; i < passes; ++i) crc ^= diloco::crc32c(buffer.bytes());
    const double s = since(t0);
    sink = sink ^ crc;
    if (r > 0) gbps.push_back(static_cast<double>(bytes * passes) / s / 1e9);  // the first pass warms up
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

}  // namespace bench
