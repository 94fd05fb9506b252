// A real etcd server for a test: Debian's etcd-server started on two free
// loopback ports with a data directory of its own, as a user would start it
// (`etcd --data-dir D --listen-client-urls ...`), ready once it answers a
// read; SIGKILLed and its directory removed at the end. The program is
// DILOCO_TEST_ETCD (CMake finds it).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <diloco/coordination/etcd.hpp>

namespace test_support {

/// A loopback TCP port no one listens on as of now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error(std::string("no free loopback port: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

class etcd_server {
 public:
  etcd_server() {
    char pattern[] = "/tmp/diloco_etcd_test.XXXXXX";
    if (!::mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    const int client = free_port(), peer = free_port();
    url_ = "http://127.0.0.1:" + std::to_string(client);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args{DILOCO_TEST_ETCD,
                                  "--name",
                                  "test",
                                  "--data-dir",
                                  (dir_ / "data").string(),
                                  "--listen-client-urls",
                                  url_,
                                  "--advertise-client-urls",
                                  url_,
                                  "--listen-peer-urls",
                                  peer_url,
                                  "--initial-advertise-peer-urls",
                                  peer_url,
                                  "--initial-cluster",
                                  "test=" + peer_url};
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int log = ::open((dir_ / "etcd.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log >= 0) ::dup2(log, 1), ::dup2(log, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Ready when it answers a read: at most 300 tries, each bounded by the
    // client's timeout, the process checked alive between them.
    diloco::etcd::client probe(url_, std::chrono::milliseconds(500));
    for (int attempt = 0; attempt < 300; ++attempt) {
      try {
        probe.get("/diloco/test/ready");
        return;
      } catch (const diloco::etcd::error&) {
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("etcd exited at start: " + log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("etcd did not answer: " + log());
  }
  etcd_server(const etcd_server&) = delete;
  etcd_server& operator=(const etcd_server&) = delete;
  ~etcd_server() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  const std::string& url() const noexcept { return url_; }

  /// SIGSTOPs or SIGCONTs the server (an etcd that does not answer).
  void pause(bool paused) { ::kill(pid_, paused ? SIGSTOP : SIGCONT); }

  /// Kills the server and waits for it.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  /// Its output so far.
  std::string log() const {
    std::ifstream in(dir_ / "etcd.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::filesystem::path dir_;
  std::string url_;
  pid_t pid_ = -1;
};

}  // namespace test_support
