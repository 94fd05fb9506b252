// A free TCP port on the loopback interface, for programs that start a
// syncer and its learners on one machine and must tell the learners the
// port before the syncer binds it (the example's launcher, diloco_chaos).
// POSIX; tool code, not part of the installed library.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace diloco_tools {

/// A port on 127.0.0.1 that nobody listens on now: the kernel picks it for a
/// socket bound to port 0, which is then closed. Another process may take it
/// before the caller binds it; the caller's bind then fails (never hangs).
/// Throws `std::runtime_error` if no socket can be made.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("diloco_tools: no socket for a free port: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok)
    throw std::runtime_error(std::string("diloco_tools: cannot find a free loopback port: ") + std::strerror(error));
  return ntohs(address.sin_port);
}

}  // namespace diloco_tools
