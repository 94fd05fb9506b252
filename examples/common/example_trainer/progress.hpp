// Progress lines of an example trainer's run in one process, on stderr:
//   [12.3s, sim 45.6s] steps 120/600 118/600 … | train loss 2.3456 | outer updates 37
// Learner threads count their steps and the syncer its updates; whoever
// waits for them prints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace example_trainer {

class progress {
 public:
  /// `learners` of `steps` steps each; a line at most every `seconds`
  /// (0: none).
  progress(std::uint32_t learners, std::uint64_t steps, double seconds)
      : steps_(learners), total_(steps), every_(seconds), started_(std::chrono::steady_clock::now()) {}

  /// Learner `learner` took a step with training loss `loss` (any thread).
  void stepped(std::uint32_t learner, double loss) {
    steps_[learner].fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    loss_ = loss_ < 0 ? loss : 0.98 * loss_ + 0.02 * loss;  // smoothed over about 50 steps
  }
  /// The syncer took an outer update (any thread).
  void updated() { updates_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t updates() const { return updates_.load(); }

  /// Prints a line if the interval has passed since the last one, or if
  /// `force`; with the simulated time if `virtual_seconds` >= 0. From one
  /// thread at a time.
  void maybe_print(bool force = false, double virtual_seconds = -1) {
    if (every_ <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::duration<double>(every_)) return;
    last_ = now;
    double loss;
    {
      std::lock_guard lock(mutex_);
      loss = loss_;
    }
    std::string line = "[" + fixed(std::chrono::duration<double>(now - started_).count(), 1) + "s";
    if (virtual_seconds >= 0) line += ", sim " + fixed(virtual_seconds, 1) + "s";
    line += "] steps";
    for (const auto& a : steps_) line += " " + std::to_string(a.load()) + "/" + std::to_string(total_);
    line += " | train loss " + fixed(loss, 4) + " | outer updates " + std::to_string(updates_.load());
    std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  static std::string fixed(double v, int digits) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", digits, v);
    return text;
  }

  std::vector<std::atomic<std::uint64_t>> steps_;
  std::uint64_t total_;
  double every_;
  std::atomic<std::uint64_t> updates_{0};
  std::mutex mutex_;
  double loss_ = -1;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace example_trainer
