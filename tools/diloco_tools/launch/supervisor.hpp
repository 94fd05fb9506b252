// The launcher's supervisor: starts a syncer and learners on this machine,
// restarts a learner that dies, forwards SIGINT and SIGTERM, prefixes every
// line the processes write, and ends them all within bounded times. Used by
// diloco_launch and by fashion_mnist --role all; docs/launch.md describes the
// behaviour. Linux (signalfd, pipe2). Tool code, not the library.
//
// One thread, one loop: poll() on the children's output pipes and a signalfd
// that receives SIGCHLD, SIGINT and SIGTERM (blocked while `run` runs), with
// a timeout no longer than the next deadline (a restart, a grace period) and
// never above one second.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <diloco_tools/launch/command.hpp>
#include <diloco_tools/launch/lines.hpp>
#include <diloco_tools/process.hpp>

namespace diloco_tools::launch {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// What to start and how to look after it. Commands are words that may hold
/// placeholders (`substitute`); each process also gets them as environment
/// variables (`environment_of`).
struct launch_plan {
  std::vector<std::string> syncer;   ///< the syncer's command; empty: start no syncer
  std::vector<std::string> learner;  ///< every learner's command (not empty)
  std::string endpoint;              ///< {endpoint} of the learners: where they reach the syncer
  std::string syncer_endpoint;       ///< {endpoint} of the syncer: where it binds (empty: `endpoint`)
  std::uint32_t learners = 1;        ///< M, {learners}: learner ids are 0 … M−1
  std::vector<std::uint32_t> ids;    ///< the learners started here (empty: all M)
  /// Restarts of each learner after an abnormal end (a signal, or a non-zero
  /// exit status), each with its incarnation + 1.
  std::uint32_t max_restarts = 3;
  /// Wait before the first restart of a learner; doubled for each further
  /// restart of the same learner, at most `max_restart_delay`.
  std::chrono::milliseconds restart_delay = 1s;
  std::chrono::milliseconds max_restart_delay = 30s;
  /// After the syncer ends: how long learners still running get to end by
  /// themselves (the syncer told them `end`) before they get SIGTERM.
  std::chrono::milliseconds learner_grace = 30s;
  /// After the last learner ends: how long the syncer gets to end by itself
  /// before SIGTERM. A learner whose `leave` was lost keeps diloco_syncer up
  /// for its heartbeat timeout (10 s) + --end-when-gone (60 s).
  std::chrono::milliseconds syncer_grace = 90s;
  /// After SIGTERM (or a forwarded SIGINT): how long before SIGKILL.
  std::chrono::milliseconds kill_after = 10s;
};

/// Which process a line or a report is about.
struct process_name {
  bool syncer = false;
  std::uint32_t id = 0;           ///< learner id
  std::uint32_t incarnation = 0;  ///< learner: 1, 2, …

  /// "syncer" or "learner 2".
  std::string to_string() const { return syncer ? std::string("syncer") : "learner " + std::to_string(id); }
};

enum class stream { out, err };

/// How one learner fared: its last incarnation, its restarts, how its last
/// process ended (nothing if it never started).
struct learner_report {
  std::uint32_t id = 0;
  std::uint32_t incarnation = 0;
  std::uint32_t restarts = 0;
  std::optional<exit_status> status;
};

/// How a launch ended.
struct launch_report {
  bool has_syncer = false;
  std::optional<exit_status> syncer;  ///< how the syncer ended (nothing: none started)
  std::vector<learner_report> learners;
  int interrupted_by = 0;  ///< SIGINT or SIGTERM received by the launcher, else 0
};

/// The launcher's exit status, from the worst of its processes' ends, each
/// read as a shell does (its exit code, or 128 + the signal that killed it):
///   1. interrupted by SIGINT or SIGTERM: 128 + that signal;
///   2. the syncer ended other than with 0: its status (it has priority);
///   3. else the largest status among the learners' last processes: 0 when
///      every learner ended with 0 at last, whatever restarts it took.
/// A process that could not be started counts as 127.
inline int worst_status(const launch_report& r) {
  if (r.interrupted_by != 0) return 128 + r.interrupted_by;
  if (r.has_syncer) {
    const int code = r.syncer ? r.syncer->shell_code() : 127;
    if (code != 0) return code;
  }
  int worst = 0;
  for (const auto& l : r.learners) worst = std::max(worst, l.status ? l.status->shell_code() : 127);
  return worst;
}

/// Where the supervisor's output goes. `line` gets every line the processes
/// write on stdout or stderr (without '\n'); `note` gets the supervisor's own
/// messages (a process started, ended, restarted, signalled).
struct launch_sinks {
  std::function<void(const process_name&, stream, std::string_view)> line;
  std::function<void(const std::string&)> note;
};

/// Writes all of `text` to `fd`, retrying after EINTR and short writes;
/// gives up quietly on any other error (a closed pipe).
inline void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

/// Sinks that write "[syncer] LINE" and "[learner 2] LINE" to this process's
/// stdout or stderr, as the line came, one write per line (lines of
/// different processes never mix), and notes as "PROGRAM: NOTE" on stderr.
inline launch_sinks prefixed_sinks(std::string program) {
  return {[](const process_name& p, stream s, std::string_view line) {
            std::string text = "[" + p.to_string() + "] ";
            text.append(line).append("\n");
            write_all(s == stream::out ? STDOUT_FILENO : STDERR_FILENO, text);
          },
          [program = std::move(program)](const std::string& note) {
            write_all(STDERR_FILENO, program + ": " + note + "\n");
          }};
}

namespace detail {

/// "1.5" for 1500 ms.
inline std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", std::chrono::duration<double>(t).count());
  return text;
}

/// Blocks SIGCHLD, SIGINT and SIGTERM for as long as it lives and receives
/// them on a descriptor instead; on destruction takes what is pending and
/// restores the signal mask.
class signal_inbox {
 public:
  signal_inbox() {
    sigset_t set;
    sigemptyset(&set);
    for (const int s : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&set, s);
    if (const int e = ::pthread_sigmask(SIG_BLOCK, &set, &old_); e != 0)
      throw std::system_error(e, std::generic_category(), "launch: pthread_sigmask");
    fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) {
      const int e = errno;
      ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
      throw std::system_error(e, std::generic_category(), "launch: signalfd");
    }
  }
  ~signal_inbox() {
    while (next()) {
    }
    ::close(fd_);
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  signal_inbox(const signal_inbox&) = delete;
  signal_inbox& operator=(const signal_inbox&) = delete;

  int fd() const { return fd_; }

  /// The next signal received, or nothing if none is waiting.
  std::optional<int> next() {
    signalfd_siginfo info{};
    for (;;) {
      const ssize_t n = ::read(fd_, &info, sizeof info);
      if (n == static_cast<ssize_t>(sizeof info)) return static_cast<int>(info.ssi_signo);
      if (n < 0 && errno == EINTR) continue;
      return std::nullopt;
    }
  }

 private:
  sigset_t old_{};
  int fd_ = -1;
};

/// A pipe a child writes one of its streams into; the read end is ours.
struct output_pipe {
  process_name from;
  stream which = stream::out;
  int fd = -1;
  line_splitter lines;
};

}  // namespace detail

/// Runs `plan` to its end and says how it went; `worst_status` of the report
/// is the launcher's exit status. Blocks SIGCHLD, SIGINT and SIGTERM while it
/// runs (call it from the main thread before starting others). Throws
/// `std::invalid_argument` before starting anything for a plan that cannot
/// work: no learner command, M = 0, an id ≥ M, a bad placeholder, a program
/// that is not found.
inline launch_report run(launch_plan plan, const launch_sinks& sinks) {
  if (plan.learner.empty()) throw std::invalid_argument("no learner command");
  if (plan.learners == 0) throw std::invalid_argument("no learners (M = 0)");
  if (plan.ids.empty())
    for (std::uint32_t i = 0; i < plan.learners; ++i) plan.ids.push_back(i);
  for (const auto id : plan.ids)
    if (id >= plan.learners)
      throw std::invalid_argument("learner id " + std::to_string(id) + " is not below the number of learners (" +
                                  std::to_string(plan.learners) + ")");
  if (plan.syncer_endpoint.empty()) plan.syncer_endpoint = plan.endpoint;
  const placeholder_values syncer_values{plan.syncer_endpoint, plan.learners, std::nullopt, std::nullopt};
  auto learner_values = [&](std::uint32_t id, std::uint32_t incarnation) {
    return placeholder_values{plan.endpoint, plan.learners, id, incarnation};
  };
  // Every placeholder and program checked before the first process starts.
  if (!plan.syncer.empty()) {
    const auto words = substitute(plan.syncer, syncer_values, "the syncer command");
    if (!find_program(words.front()))
      throw std::invalid_argument("the syncer program '" + words.front() + "' is not found");
  }
  {
    const auto words = substitute(plan.learner, learner_values(plan.ids.front(), 1), "the learner command");
    if (!find_program(words.front()))
      throw std::invalid_argument("the learner program '" + words.front() + "' is not found");
  }

  struct member {
    process_name name;
    std::optional<child_process> process;
    std::optional<steady::time_point> restart_at;
    std::uint32_t restarts = 0;
    std::optional<exit_status> status;
    bool done = false;  ///< will not run again

    void retire() {
      done = true;
      restart_at.reset();
    }
  };
  std::vector<member> members;  // the learners, then the syncer if any
  for (const auto id : plan.ids) members.emplace_back().name = process_name{false, id, 0};
  if (!plan.syncer.empty()) members.emplace_back().name = process_name{true, 0, 0};
  const bool has_syncer = !plan.syncer.empty();
  auto is_syncer = [](const member& m) { return m.name.syncer; };

  detail::signal_inbox inbox;
  std::list<detail::output_pipe> pipes;
  launch_report report;
  report.has_syncer = has_syncer;
  std::optional<steady::time_point> learners_term_at, syncer_term_at, kill_at;
  bool syncer_gone = false;
  auto note = [&](const std::string& text) {
    if (sinks.note) sinks.note(text);
  };
  auto name_of = [](const member& m) {
    return m.name.syncer ? std::string("syncer")
                         : m.name.to_string() + " incarnation " + std::to_string(m.name.incarnation);
  };

  auto start = [&](member& m) {
    m.restart_at.reset();
    std::vector<std::string> argv, env;
    if (m.name.syncer) {
      argv = substitute(plan.syncer, syncer_values, "the syncer command");
      env = environment_of(syncer_values);
    } else {
      ++m.name.incarnation;
      const auto values = learner_values(m.name.id, m.name.incarnation);
      argv = substitute(plan.learner, values, "the learner command");
      env = environment_of(values);
    }
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      const int e = errno;
      for (const int fd : {out[0], out[1]})
        if (fd >= 0) ::close(fd);
      throw std::system_error(e, std::generic_category(), "launch: pipe2");
    }
    std::string command;
    for (const auto& word : argv) command.append(command.empty() ? "" : " ").append(word);
    try {
      m.process = child_process::spawn(
          {.argv = argv, .stdout_fd = out[1], .stderr_fd = err[1], .environment = env, .null_stdin = true});
    } catch (const std::system_error& e) {
      note("cannot start " + name_of(m) + ": " + e.what());
      m.status = exit_status{true, 127, 0};
    }
    ::close(out[1]);
    ::close(err[1]);
    for (const auto& [fd, which] : {std::pair{out[0], stream::out}, std::pair{err[0], stream::err}}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      pipes.push_back({m.name, which, fd, line_splitter{}});
    }
    if (m.process) note("started " + name_of(m) + " (pid " + std::to_string(m.process->pid()) + "): " + command);
  };

  // A process that ended: restart it, or record that it is done.
  auto ended = [&](member& m) {
    const exit_status s = *m.status;
    if (m.name.syncer) {
      m.retire();
      syncer_gone = true;
      note("the syncer ended: " + s.to_string());
      const bool learners_left =
          std::any_of(members.begin(), members.end(), [&](const member& o) { return !is_syncer(o) && o.process; });
      for (auto& o : members)
        if (!is_syncer(o) && !o.process) o.retire();  // no restart without a syncer
      if (learners_left && !report.interrupted_by) learners_term_at = steady::now() + plan.learner_grace;
      return;
    }
    const bool abnormal = s.shell_code() != 0;
    if (!abnormal) {
      m.retire();
      note(name_of(m) + " ended: exit 0");
      return;
    }
    if (report.interrupted_by || syncer_gone || m.restarts >= plan.max_restarts) {
      m.retire();
      note(name_of(m) + " ended: " + s.to_string() +
           (report.interrupted_by || syncer_gone
                ? std::string()
                : "; no restart left (--max-restarts " + std::to_string(plan.max_restarts) + ")"));
      return;
    }
    auto delay = plan.restart_delay;
    for (std::uint32_t i = 0; i < m.restarts && delay < plan.max_restart_delay; ++i) delay *= 2;
    delay = std::min(delay, plan.max_restart_delay);
    ++m.restarts;
    m.restart_at = steady::now() + delay;
    note(name_of(m) + " ended: " + s.to_string() + "; restarting it as incarnation " +
         std::to_string(m.name.incarnation + 1) + " in " + detail::seconds_text(delay) + " s (restart " +
         std::to_string(m.restarts) + " of " + std::to_string(plan.max_restarts) + ")");
  };

  auto reap = [&] {
    for (auto& m : members)
      if (m.process)
        if (const auto s = m.process->poll()) {
          m.status = *s;
          m.process.reset();
          ended(m);
        }
  };
  auto signal_all = [&](int sig, bool learners, bool syncer) {
    for (auto& m : members)
      if (m.process && (is_syncer(m) ? syncer : learners)) m.process->signal(sig);
  };

  // The syncer first, so that it binds before the learners connect (they
  // would wait for it anyway).
  if (has_syncer) {
    start(members.back());
    if (!members.back().process) ended(members.back());
  }
  for (auto& m : members)
    if (!is_syncer(m) && !m.done) {
      start(m);
      if (!m.process) ended(m);
    }

  std::optional<steady::time_point> drain_until;
  std::vector<pollfd> fds;
  std::vector<detail::output_pipe*> polled;
  for (;;) {
    reap();
    const auto now = steady::now();
    // Restarts that are due.
    for (auto& m : members)
      if (m.restart_at && *m.restart_at <= now && !m.done) {
        start(m);
        if (!m.process) ended(m);
      }
    // With every learner done, the syncer has `grace` to end by itself.
    if (has_syncer && !syncer_gone && !syncer_term_at &&
        std::all_of(members.begin(), members.end(), [&](const member& m) { return is_syncer(m) || m.done; }))
      syncer_term_at = now + plan.syncer_grace;
    auto due = [&](std::optional<steady::time_point>& at) {
      if (!at || *at > now) return false;
      at.reset();
      return true;
    };
    if (due(learners_term_at)) {
      note("learners still running " + detail::seconds_text(plan.learner_grace) + " s after the syncer ended: SIGTERM");
      signal_all(SIGTERM, true, false);
      if (!kill_at) kill_at = now + plan.kill_after;
    }
    if (due(syncer_term_at)) {
      note("the syncer still runs " + detail::seconds_text(plan.syncer_grace) +
           " s after the last learner ended: SIGTERM");
      signal_all(SIGTERM, false, true);
      if (!kill_at) kill_at = now + plan.kill_after;
    }
    if (due(kill_at)) {
      note("processes still running " + detail::seconds_text(plan.kill_after) + " s after SIGTERM: SIGKILL");
      signal_all(SIGKILL, true, true);
    }

    const bool running =
        std::any_of(members.begin(), members.end(), [](const member& m) { return m.process.has_value(); });
    const bool pending =
        std::any_of(members.begin(), members.end(), [](const member& m) { return !m.done && !m.process; });
    if (!running && !pending) {
      // Every process is reaped (its group killed); what a grandchild that
      // left the group still holds open gets two seconds.
      if (pipes.empty()) break;
      if (!drain_until) drain_until = now + 2s;
      if (now >= *drain_until) break;
    }

    // Sleep until output, a signal, or the next deadline (at most 1 s).
    auto next = now + 1s;
    for (const auto& at : {learners_term_at, syncer_term_at, kill_at, drain_until})
      if (at) next = std::min(next, *at);
    for (const auto& m : members)
      if (m.restart_at) next = std::min(next, *m.restart_at);
    const auto wait_ms = std::max<long long>(0, std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
    fds.assign(1, pollfd{inbox.fd(), POLLIN, 0});
    polled.clear();
    for (auto& p : pipes) {
      fds.push_back({p.fd, POLLIN, 0});
      polled.push_back(&p);
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "launch: poll");

    while (const auto sig = inbox.next()) {
      if (*sig == SIGCHLD) continue;  // reaped at the top of the loop
      if (!report.interrupted_by) {
        report.interrupted_by = *sig;
        note(std::string("received ") + (*sig == SIGINT ? "SIGINT" : "SIGTERM") + ": passed on to every process; " +
             "SIGKILL after " + detail::seconds_text(plan.kill_after) + " s");
        signal_all(*sig, true, true);
        for (auto& m : members)
          if (!m.process) m.retire();  // no more restarts
        kill_at = steady::now() + plan.kill_after;
        learners_term_at.reset();
        syncer_term_at.reset();
      } else {
        note("received a second signal: SIGKILL to every process");
        signal_all(SIGKILL, true, true);
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto& p = *polled[i - 1];
      auto emit = [&](std::string_view line) {
        if (sinks.line) sinks.line(p.from, p.which, line);
      };
      char buffer[65536];
      const ssize_t n = ::read(p.fd, buffer, sizeof buffer);
      if (n > 0) {
        p.lines.feed(std::string_view(buffer, static_cast<std::size_t>(n)), emit);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        p.lines.finish(emit);
        ::close(p.fd);
        p.fd = -1;
      }
    }
    pipes.remove_if([](const detail::output_pipe& p) { return p.fd < 0; });
  }
  for (auto& p : pipes) {
    p.lines.finish([&](std::string_view line) {
      if (sinks.line) sinks.line(p.from, p.which, line);
    });
    ::close(p.fd);
  }

  for (const auto& m : members) {
    if (is_syncer(m))
      report.syncer = m.status;
    else
      report.learners.push_back({m.name.id, m.name.incarnation, m.restarts, m.status});
  }
  return report;
}

}  // namespace diloco_tools::launch
