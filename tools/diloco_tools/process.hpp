// A child process (POSIX) for the tools that run others (diloco_chaos,
// diloco_launch): started in its own process group with its output in files
// or pipes, so that it can be killed, paused and resumed as a whole, and
// always reaped — no zombie and no stray process outlives it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace diloco_tools {

/// What to start: `argv[0]` is looked up in `PATH` unless it contains a '/'.
/// The child inherits the environment (with `environment` on top) and stdin
/// (unless `null_stdin`).
struct process_spec {
  std::vector<std::string> argv{};
  std::filesystem::path stdout_path{};  ///< empty: inherit the parent's stdout
  std::filesystem::path stderr_path{};  ///< empty: inherit the parent's stderr; equal to `stdout_path`: one shared file
  bool append = true;                   ///< append to the files; false truncates them
  int stdout_fd = -1;  ///< >= 0: this descriptor (a pipe's write end) becomes its stdout, `stdout_path` unused
  int stderr_fd = -1;  ///< >= 0: this descriptor becomes its stderr, `stderr_path` unused
  std::vector<std::string> environment{};  ///< "NAME=VALUE" entries that replace or add to the inherited ones
  bool null_stdin = false;                 ///< stdin from /dev/null (a child in its own group must not read the tty)
};

/// How a child ended: `exited` with `code`, or killed by `signal`.
struct exit_status {
  bool exited = false;
  int code = 0;
  int signal = 0;

  /// "exit 3" or "signal 9".
  std::string to_string() const { return exited ? "exit " + std::to_string(code) : "signal " + std::to_string(signal); }
  /// As a shell reports it: the exit code, or 128 + the signal.
  int shell_code() const { return exited ? code : 128 + signal; }
  bool operator==(const exit_status&) const = default;
};

/// One child process, the leader of its own process group, owned: move-only,
/// and destroying it kills (SIGKILL) and reaps whatever still runs. When the
/// leader ends, its group dies with it: `poll` kills (SIGKILL) anything the
/// leader left behind in its group before reaping it. Processes that leave
/// the group (`setsid`, `setpgid`) are out of reach. Not thread-safe; needs
/// SIGCHLD not to be ignored (else the kernel reaps children itself).
class child_process {
 public:
  /// Starts `spec` with `posix_spawnp`. Its signal mask is empty and every
  /// signal has its default disposition, whatever the parent blocks or
  /// ignores. Throws `std::invalid_argument` for an empty `argv` and
  /// `std::system_error` naming the program when it cannot be started (no
  /// such program, not executable, an output file that cannot be opened).
  static child_process spawn(const process_spec& spec) {
    if (spec.argv.empty()) throw std::invalid_argument("diloco_tools::child_process: argv is empty");
    const std::string& program = spec.argv.front();
    auto fail = [&](int error) {
      std::string what = "diloco_tools::child_process: cannot start '" + program + "'";
      if (!spec.stdout_path.empty()) what += " (stdout to '" + spec.stdout_path.string() + "')";
      if (!spec.stderr_path.empty()) what += " (stderr to '" + spec.stderr_path.string() + "')";
      throw std::system_error(error, std::generic_category(), what);
    };
    spawn_setup setup;
    if (setup.error) fail(setup.error);
    const int flags = O_WRONLY | O_CREAT | (spec.append ? O_APPEND : O_TRUNC);
    int error = 0;
    if (spec.null_stdin)
      error = posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    if (!error && spec.stdout_fd >= 0)
      error = posix_spawn_file_actions_adddup2(&setup.actions, spec.stdout_fd, STDOUT_FILENO);
    else if (!error && !spec.stdout_path.empty())
      error = posix_spawn_file_actions_addopen(&setup.actions, STDOUT_FILENO, spec.stdout_path.c_str(), flags, 0644);
    if (!error && spec.stderr_fd >= 0) {
      error = posix_spawn_file_actions_adddup2(&setup.actions, spec.stderr_fd, STDERR_FILENO);
    } else if (!error && !spec.stderr_path.empty()) {
      error =
          spec.stderr_path == spec.stdout_path
              ? posix_spawn_file_actions_adddup2(&setup.actions, STDOUT_FILENO, STDERR_FILENO)
              : posix_spawn_file_actions_addopen(&setup.actions, STDERR_FILENO, spec.stderr_path.c_str(), flags, 0644);
    }
    if (error) fail(error);
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> merged;
    std::vector<char*> envp;
    char** env = environ;
    if (!spec.environment.empty()) {
      auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
      for (char** e = environ; *e; ++e) {
        const std::string_view entry = *e;
        bool replaced = false;
        for (const auto& mine : spec.environment) replaced = replaced || name_of(mine) == name_of(entry);
        if (!replaced) merged.emplace_back(entry);
      }
      merged.insert(merged.end(), spec.environment.begin(), spec.environment.end());
      for (auto& e : merged) envp.push_back(e.data());
      envp.push_back(nullptr);
      env = envp.data();
    }
    pid_t pid = -1;
    // glibc reports a failed exec (or open) in the child as this result.
    error = posix_spawnp(&pid, program.c_str(), &setup.actions, &setup.attributes, argv.data(), env);
    if (error) fail(error);
    return child_process(pid);
  }

  child_process(child_process&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), status_(std::move(other.status_)) {}
  child_process& operator=(child_process&& other) noexcept {
    if (this != &other) {
      finish();
      pid_ = std::exchange(other.pid_, -1);
      status_ = std::move(other.status_);
    }
    return *this;
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() { finish(); }

  /// The process id, which is also its process group id.
  pid_t pid() const noexcept { return pid_; }

  /// Sends `sig` to the whole process group (SIGSTOP pauses it, SIGCONT
  /// resumes it), or to the leader alone should it have left its group. False
  /// once the child has been reaped, or if the kernel refused.
  bool signal(int sig) noexcept {
    if (pid_ <= 0 || status_) return false;
    const bool group = ::kill(-pid_, sig) == 0;
    return group || ::kill(pid_, sig) == 0;
  }

  /// Non-blocking: how the child ended, or nothing while it runs (a paused
  /// child runs). The first call that sees the end kills the rest of its group
  /// and reaps it; later calls give the same status.
  std::optional<exit_status> poll() {
    assert(pid_ > 0 && "poll on a moved-from child_process");
    if (status_) return status_;
    siginfo_t info{};
    // WNOWAIT keeps the leader a zombie, so its group id stays reserved while
    // the rest of the group is killed.
    while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
      if (errno != EINTR)
        throw std::system_error(errno, std::generic_category(), "diloco_tools::child_process: waitid");
    if (info.si_pid == 0) return std::nullopt;
    ::kill(-pid_, SIGKILL);
    return reap();
  }

  /// Polls every 2 ms for at most `timeout`: how the child ended, or nothing
  /// if it still runs then.
  std::optional<exit_status> wait_for(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto s = poll()) return s;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return std::nullopt;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(2)));
    }
  }

  /// Kills the group (SIGKILL, which also ends a paused process) and waits for
  /// the leader: blocks only as long as the kernel takes to deliver it. The
  /// status of an already reaped child is returned as it was.
  exit_status kill_and_reap() {
    assert(pid_ > 0 && "kill_and_reap on a moved-from child_process");
    if (status_) return *status_;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);  // should the leader have left its group
    return reap();
  }

 private:
  explicit child_process(pid_t pid) noexcept : pid_(pid) {}

  /// The spawn attributes and file actions, destroyed on every path.
  struct spawn_setup {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    bool has_actions = false, has_attributes = false;
    int error = 0;
    spawn_setup() {
      has_actions = (error = posix_spawn_file_actions_init(&actions)) == 0;
      if (has_actions) has_attributes = (error = posix_spawnattr_init(&attributes)) == 0;
      if (error) return;
      sigset_t none, all;
      sigemptyset(&none);
      sigfillset(&all);
      sigdelset(&all, SIGKILL);
      sigdelset(&all, SIGSTOP);
      error =
          posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
      if (!error) error = posix_spawnattr_setpgroup(&attributes, 0);
      if (!error) error = posix_spawnattr_setsigmask(&attributes, &none);
      if (!error) error = posix_spawnattr_setsigdefault(&attributes, &all);
    }
    ~spawn_setup() {
      if (has_attributes) posix_spawnattr_destroy(&attributes);
      if (has_actions) posix_spawn_file_actions_destroy(&actions);
    }
    spawn_setup(const spawn_setup&) = delete;
    spawn_setup& operator=(const spawn_setup&) = delete;
  };

  /// Waits for the leader, which has ended or been sent SIGKILL.
  exit_status reap() {
    int raw = 0;
    while (::waitpid(pid_, &raw, 0) < 0)
      if (errno != EINTR)
        throw std::system_error(errno, std::generic_category(), "diloco_tools::child_process: waitpid");
    status_ = WIFEXITED(raw) ? exit_status{true, WEXITSTATUS(raw), 0} : exit_status{false, 0, WTERMSIG(raw)};
    return *status_;
  }

  void finish() noexcept {
    if (pid_ <= 0 || status_) return;
    try {
      kill_and_reap();
    } catch (const std::system_error&) {
      // Reaped elsewhere (SIGCHLD ignored): nothing is left to wait for.
    }
  }

  pid_t pid_ = -1;
  std::optional<exit_status> status_;
};

}  // namespace diloco_tools
