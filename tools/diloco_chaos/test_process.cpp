// ctest-labels: unit chaos
// Child processes for chaos runs: exit codes and output files, SIGKILL,
// SIGSTOP/SIGCONT of the whole group, no grandchild left behind, no zombie
// left by the destructor, a clean signal state whatever the parent's, and
// the leaves below a process (a unit's ranks under its launcher).
// Every wait is bounded.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <diloco_tools/process.hpp>

#include "runner.hpp"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using diloco_tools::child_process;
using diloco_tools::exit_status;
using diloco_tools::process_spec;

struct scratch {
  fs::path dir = fs::temp_directory_path() / ("diloco-process-" + std::to_string(::getpid()) + "-" +
                                              std::to_string(reinterpret_cast<std::uintptr_t>(this)));
  scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~scratch() { fs::remove_all(dir); }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::uintmax_t size_of(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

/// Polls `done` every 5 ms for at most `limit`.
template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds limit = 3s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

/// True while `pid` exists and is not a zombie (a zombie whose parent is
/// gone waits for init, which in a container may never reap it).
bool running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

process_spec sh(const std::string& script, fs::path out = {}, fs::path err = {}) {
  return {{"/bin/sh", "-c", script}, std::move(out), std::move(err)};
}

bool reaped(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == -1 && errno == ECHILD; }

/// The processes of group `group` as "PID:STATE COMMAND" from /proc/PID/stat,
/// one per line.
std::string group_states(pid_t group) {
  std::string listing;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string stat = slurp(entry.path() / "stat");
    const auto open = stat.find('('), paren = stat.rfind(')');
    if (open == std::string::npos || paren == std::string::npos) continue;  // not a process, or gone
    std::istringstream fields(stat.substr(paren + 2));
    char state = 0;
    long parent = 0, pgrp = 0;
    if (!(fields >> state >> parent >> pgrp) || pgrp != group) continue;
    listing += entry.path().filename().string() + ":" + state + " " + stat.substr(open + 1, paren - open - 1) + "\n";
  }
  return listing;
}

/// True once every process of group `group` is stopped or a zombie (state T
/// or Z): none of them is inside a write any more.
bool group_stopped(pid_t group) {
  const std::string listing = group_states(group);
  if (listing.empty()) return false;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    const char state = line[line.find(':') + 1];
    if (state != 'T' && state != 'Z') return false;
  }
  return true;
}

/// The first line of `path`, once the child has written it.
pid_t first_pid_in(const fs::path& path) {
  BOOST_TEST_REQUIRE(eventually([&] { return slurp(path).find('\n') != std::string::npos; }));
  return static_cast<pid_t>(std::stol(slurp(path)));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(chaos_process)

BOOST_FIXTURE_TEST_CASE(a_child_exits_with_its_code_and_its_output_lands_in_files, scratch) {
  const auto out = dir / "out.log", err = dir / "err.log";
  auto child = child_process::spawn(sh("echo hi; echo oops >&2; exit 3", out, err));
  const auto status = child.wait_for(5s);
  BOOST_TEST_REQUIRE(status.has_value());
  BOOST_TEST(status->exited);
  BOOST_TEST(status->code == 3);
  BOOST_TEST(status->to_string() == "exit 3");
  BOOST_TEST((child.poll() == status));  // reaped once, the status stays
  BOOST_TEST(!child.signal(SIGTERM));
  BOOST_TEST(slurp(out) == "hi\n");
  BOOST_TEST(slurp(err) == "oops\n");
  // Appends by default; truncates when asked; one file for both streams.
  BOOST_TEST_REQUIRE(child_process::spawn(sh("echo again", out)).wait_for(5s).has_value());
  BOOST_TEST(slurp(out) == "hi\nagain\n");
  auto spec = sh("echo one; echo two >&2", out, out);
  spec.append = false;
  BOOST_TEST_REQUIRE(child_process::spawn(spec).wait_for(5s).has_value());
  BOOST_TEST(slurp(out) == "one\ntwo\n");
}

BOOST_AUTO_TEST_CASE(sigkill_ends_a_sleeping_child_at_once) {
  auto child = child_process::spawn({{"sleep", "30"}});
  BOOST_TEST(::getpgid(child.pid()) == child.pid());  // the leader of its own group
  BOOST_TEST(::getpgid(child.pid()) != ::getpgrp());
  BOOST_TEST(!child.poll().has_value());
  const auto start = std::chrono::steady_clock::now();
  BOOST_TEST(child.signal(SIGKILL));
  const auto status = child.wait_for(3s);
  BOOST_TEST_REQUIRE(status.has_value());
  const auto took = std::chrono::steady_clock::now() - start;
  BOOST_TEST((took < 2s));
  BOOST_TEST(!status->exited);
  BOOST_TEST(status->signal == SIGKILL);
  BOOST_TEST(status->to_string() == "signal 9");
  BOOST_TEST(reaped(child.pid()));
}

BOOST_FIXTURE_TEST_CASE(a_paused_child_stops_writing_and_resumes_after_sigcont, scratch) {
  const auto counter = dir / "counter";
  // The writer is a grandchild: only a signal to the whole group stops it.
  // It runs under bash, not dash: dash starts `sleep` with vfork, and a
  // parent whose vfork child was stopped before its exec waits in state D
  // (SIGSTOP pending) rather than T, which `group_stopped` cannot tell from a
  // write still under way.
  auto child = child_process::spawn(
      {{"/bin/bash", "-c", "(i=0; while :; do i=$((i+1)); echo $i; sleep 0.01; done) & wait"}, counter});
  BOOST_TEST_REQUIRE(eventually([&] { return size_of(counter) > 20; }));
  BOOST_TEST(child.signal(SIGSTOP));
  BOOST_TEST_REQUIRE(eventually([&] { return group_stopped(child.pid()); }),  // a write under way has ended
                     "not every process of the group stopped:\n"
                         << group_states(child.pid()));
  const auto paused_at = size_of(counter);
  std::this_thread::sleep_for(300ms);  // a writer not stopped would write 30 lines meanwhile
  BOOST_TEST(size_of(counter) == paused_at);
  BOOST_TEST(!child.poll().has_value());  // paused is not ended
  BOOST_TEST(child.signal(SIGCONT));
  BOOST_TEST(eventually([&] { return size_of(counter) > paused_at + 20; }, 2s));
  // SIGKILL ends a paused process too.
  BOOST_TEST(child.signal(SIGSTOP));
  const auto status = child.kill_and_reap();
  BOOST_TEST(!status.exited);
  BOOST_TEST(status.signal == SIGKILL);
  BOOST_TEST(reaped(child.pid()));
}

BOOST_FIXTURE_TEST_CASE(killing_the_group_leaves_no_grandchild, scratch) {
  const auto out = dir / "pid";
  auto child = child_process::spawn(sh("sleep 30 & echo $!; wait", out));
  const pid_t grandchild = first_pid_in(out);
  BOOST_TEST_REQUIRE(running(grandchild));
  BOOST_TEST(grandchild != child.pid());
  BOOST_TEST(child.signal(SIGKILL));
  BOOST_TEST(eventually([&] { return !running(grandchild); }));  // before `wait_for` cleans up the group
  const auto status = child.wait_for(3s);
  BOOST_TEST_REQUIRE(status.has_value());
  BOOST_TEST(status->signal == SIGKILL);
}

BOOST_FIXTURE_TEST_CASE(the_leaves_below_a_process_are_its_units_ranks, scratch) {
  // A launcher's shape: one rank its own child, one below a process of its
  // own (a subshell); each sleep echoes its pid. The leaves are the two
  // sleeps, not the subshell; a process without children has none.
  const auto out = dir / "pids";
  auto child = child_process::spawn(sh("sleep 30 & echo $!; (sleep 30 & echo $!; wait) & wait", out));
  std::vector<pid_t> echoed;
  BOOST_TEST_REQUIRE(eventually([&] {
    std::istringstream in(slurp(out));
    echoed.clear();
    for (pid_t p; in >> p;) echoed.push_back(p);
    return echoed.size() == 2;
  }));
  std::sort(echoed.begin(), echoed.end());
  BOOST_TEST(diloco_chaos::descendant_leaves(child.pid()) == echoed, boost::test_tools::per_element());
  auto lone = child_process::spawn(sh("exec sleep 30", dir / "lone"));
  BOOST_TEST(diloco_chaos::descendant_leaves(lone.pid()).empty());
}

BOOST_FIXTURE_TEST_CASE(the_leaders_exit_takes_its_group_with_it, scratch) {
  const auto out = dir / "pid";
  const auto go = dir / "go";
  // The leader exits once the grandchild has been seen running (the file
  // `go`), at most 10 s on.
  auto child = child_process::spawn(sh("sleep 30 & echo $!; i=0; while [ ! -e '" + go.string() +
                                           "' ] && [ $i -lt 1000 ]; do sleep 0.01; "
                                           "i=$((i+1)); done; exit 5",
                                       out));
  const pid_t grandchild = first_pid_in(out);
  BOOST_TEST_REQUIRE(running(grandchild));
  { std::ofstream touch(go); }
  const auto status = child.wait_for(3s);
  BOOST_TEST_REQUIRE(status.has_value());
  BOOST_TEST(status->exited);
  BOOST_TEST(status->code == 5);
  BOOST_TEST(eventually([&] { return !running(grandchild); }));
}

BOOST_FIXTURE_TEST_CASE(a_program_that_cannot_start_throws_with_its_name, scratch) {
  auto throws = [](const process_spec& spec, int code, const std::string& name) {
    try {
      child_process::spawn(spec);
    } catch (const std::system_error& e) {
      BOOST_TEST(e.code().value() == code, e.what());
      BOOST_TEST(std::string(e.what()).find(name) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("spawning " << name << " did not throw");
  };
  throws({{"diloco-no-such-program", "x"}}, ENOENT, "diloco-no-such-program");
  throws({{"/nonexistent/diloco-program"}}, ENOENT, "/nonexistent/diloco-program");
  throws({{"/dev/null"}}, EACCES, "/dev/null");
  throws(sh("exit 0", dir / "missing" / "out.log"), ENOENT, "missing/out.log");
  BOOST_CHECK_THROW(child_process::spawn({}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(the_destructor_and_move_assignment_kill_and_reap) {
  pid_t first = -1, second = -1;
  {
    auto a = child_process::spawn({{"sleep", "30"}});
    auto b = child_process::spawn({{"sleep", "30"}});
    first = a.pid();
    second = b.pid();
    a = std::move(b);  // kills and reaps the first
    BOOST_TEST(reaped(first));
    BOOST_TEST(a.pid() == second);
    BOOST_TEST(running(second));
    child_process c = std::move(a);  // a moved-from child owns nothing
  }
  BOOST_TEST(reaped(second));
  BOOST_TEST(!running(second));
}

BOOST_AUTO_TEST_CASE(a_child_starts_with_a_clean_signal_state) {
  // The parent blocks SIGTERM and ignores SIGINT; neither reaches the child.
  sigset_t term, previous_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  BOOST_TEST_REQUIRE(::pthread_sigmask(SIG_BLOCK, &term, &previous_mask) == 0);
  struct sigaction ignore {
  }, previous_int{};
  ignore.sa_handler = SIG_IGN;
  BOOST_TEST_REQUIRE(::sigaction(SIGINT, &ignore, &previous_int) == 0);
  auto a = child_process::spawn({{"sleep", "30"}});
  auto b = child_process::spawn({{"sleep", "30"}});
  ::sigaction(SIGINT, &previous_int, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);

  BOOST_TEST(a.signal(SIGTERM));
  const auto terminated = a.wait_for(3s);
  BOOST_TEST_REQUIRE(terminated.has_value());
  BOOST_TEST(terminated->signal == SIGTERM);
  BOOST_TEST(b.signal(SIGINT));
  const auto interrupted = b.wait_for(3s);
  BOOST_TEST_REQUIRE(interrupted.has_value());
  BOOST_TEST(interrupted->signal == SIGINT);
}

BOOST_AUTO_TEST_SUITE_END()
