// `fashion_mnist --role all`: starts 1 syncer and M learner processes of this
// same program on this machine, connected over ZeroMQ TCP on a free loopback
// port, waits for them and prints the syncer's result.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <diloco_tools/loopback.hpp>

#include "trainer.hpp"

extern char** environ;

namespace fashion {

/// Starting, reading and waiting for the processes of `--role all`.
namespace process {

struct child {
  pid_t pid = -1;
  int out = -1;  ///< read end of its standard output
};

/// Starts this program again with `args`; its standard output comes back
/// through a pipe, its standard error is shared.
inline child spawn(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  child c;
  const int rc = posix_spawn(&c.pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw std::runtime_error(std::string("cannot start a process: ") + std::strerror(rc));
  }
  c.out = pipe_fds[0];
  return c;
}

/// Everything the child writes until it closes its output.
inline std::string drain(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

/// Waits for `pid` at most `limit`; kills it (SIGKILL) after that. Returns
/// its exit status, or -1 if it had to be killed or died of a signal.
inline int reap(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string last_line(const std::string& text) {
  const auto end = text.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  const auto begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

}  // namespace process

inline int launch_all(int argc, char** argv, const settings& s) {
  const std::string endpoint =
      s.endpoint.empty() ? "tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port()) : s.endpoint;
  std::vector<std::string> common{argv[0]};
  // Every option but the ones each process gets its own value of, in both
  // spellings: "--role all" and "--role=all".
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    bool own = false;
    for (const std::string_view flag : {"--role", "--endpoint", "--learner-id"}) {
      if (a == flag) {
        own = true;
        ++i;
      } else if (a.starts_with(flag) && a.substr(flag.size()).starts_with("=")) {
        own = true;
      }
    }
    if (!own) common.emplace_back(a);
  }
  std::fprintf(stderr, "fashion_mnist: starting 1 syncer and %u learner processes on %s\n", s.learners, endpoint.c_str());

  auto with = [&](std::initializer_list<std::string> extra) {
    auto args = common;
    args.insert(args.end(), extra);
    return args;
  };
  const auto syncer = process::spawn(with({"--role", "syncer", "--endpoint", endpoint}));
  std::vector<process::child> learners;
  for (std::uint32_t i = 0; i < s.learners; ++i)
    learners.push_back(process::spawn(
        with({"--role", "learner", "--endpoint", endpoint, "--learner-id", std::to_string(i), "--progress", "0"})));

  bool failed = false;
  std::uint64_t inner_steps = 0;
  for (std::uint32_t i = 0; i < s.learners; ++i) {
    const std::string out = process::drain(learners[i].out);
    const int status = process::reap(learners[i].pid, std::chrono::seconds(10));
    const auto line = nlohmann::json::parse(process::last_line(out), nullptr, /*allow_exceptions=*/false);
    if (status != 0 || !line.is_object() || !line.contains("inner_steps") || !line["inner_steps"].is_number_unsigned()) {
      std::fprintf(stderr, "fashion_mnist: learner %u failed (exit status %d)\n", i, status);
      failed = true;
      continue;
    }
    inner_steps += line["inner_steps"].get<std::uint64_t>();
  }
  // With every learner gone the syncer stops by itself; do not wait forever.
  std::string result;
  {
    std::thread reader([&] { result = process::drain(syncer.out); });
    const int status = process::reap(syncer.pid, failed ? std::chrono::seconds(1) : std::chrono::seconds(120));
    reader.join();
    if (status != 0) {
      std::fprintf(stderr, "fashion_mnist: the syncer failed (exit status %d)\n", status);
      return 1;
    }
  }
  // The syncer's result line, with the inner steps the learners counted.
  auto line = nlohmann::ordered_json::parse(process::last_line(result), nullptr, /*allow_exceptions=*/false);
  if (!line.is_object()) {
    std::fprintf(stderr, "fashion_mnist: the syncer printed no result line\n");
    return 1;
  }
  line["inner_steps"] = inner_steps;
  std::printf("%s\n", line.dump().c_str());
  return failed ? 1 : 0;
}

}  // namespace fashion
