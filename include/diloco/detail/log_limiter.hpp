// Rate limiting of log lines by category, with a periodic summary of what was
// held back, so that a flood of bad messages cannot flood the log.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace diloco::detail {

/// Per category a token bucket: `burst` lines at once, refilled at one line
/// per `interval / burst`. Lines beyond it are counted, not written; `summary`
/// names the counts once per `interval` when any line was held back.
/// Categories are small integers (e.g. a `reject_reason`). Cost: O(1) per line.
class log_limiter {
 public:
  using clock_type = std::chrono::steady_clock;

  log_limiter(std::size_t categories, std::uint32_t burst = 5,
              std::chrono::nanoseconds interval = std::chrono::seconds(10))
      : burst_(burst), interval_(interval), buckets_(categories) {}

  /// Whether a line of `category` may be written at `now` (else it is counted).
  bool admit(std::size_t category, clock_type::time_point now) {
    if (category >= buckets_.size()) category = buckets_.size() - 1;
    auto& b = buckets_[category];
    if (!b.started) {
      b = bucket{true, double(burst_), now, 0};
    } else if (now > b.at) {
      const double refill =
          double(burst_) * std::chrono::duration<double>(now - b.at) / std::chrono::duration<double>(interval_);
      b.tokens = std::min(double(burst_), b.tokens + refill);
      b.at = now;
    }
    if (b.tokens >= 1.0) {
      b.tokens -= 1.0;
      return true;
    }
    ++b.held;
    ++held_total_;
    return false;
  }

  /// When lines were held back and `interval` has passed since the last
  /// summary: "held back N lines: name1 n1, name2 n2" (names from `name`),
  /// and the counts restart. Otherwise empty.
  template <class Name>
  std::string summary(clock_type::time_point now, Name&& name) {
    if (held_total_ == 0 || (summarized_ && now - *summarized_ < interval_)) return {};
    std::string line = "held back " + std::to_string(held_total_) + " log line(s) in the last " +
                       std::to_string(std::chrono::duration_cast<std::chrono::seconds>(interval_).count()) + " s:";
    const char* sep = " ";
    for (std::size_t c = 0; c < buckets_.size(); ++c) {
      if (buckets_[c].held == 0) continue;
      line.append(sep).append(name(c)).append(" ").append(std::to_string(buckets_[c].held));
      buckets_[c].held = 0;
      sep = ", ";
    }
    held_total_ = 0;
    summarized_ = now;
    return line;
  }

  std::uint64_t held() const noexcept { return held_total_; }

 private:
  struct bucket {
    bool started = false;
    double tokens = 0;
    clock_type::time_point at{};
    std::uint64_t held = 0;
  };

  std::uint32_t burst_;
  std::chrono::nanoseconds interval_;
  std::vector<bucket> buckets_;
  std::uint64_t held_total_ = 0;
  std::optional<clock_type::time_point> summarized_;
};

}  // namespace diloco::detail
