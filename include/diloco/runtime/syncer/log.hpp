// The syncer's log: its lines, rate-limited per category (each refusal
// reason, liveness, membership, rounds, undecodable messages), and the
// summary of what was held back.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/detail/log_limiter.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/reject_reason.hpp"

namespace diloco::detail {

/// What a syncer's log line is about: one category per refusal reason, then these.
enum class syncer_log_category : std::size_t {
  liveness = reject_reason_count,
  membership,
  rounds,
  undecodable,
  count_
};

/// Writes a syncer's lines to `syncer_options::log`, at most a few per
/// category every 10 s (real time, not the clock the syncer is driven with:
/// log volume is a real-time matter). Without a sink it builds no line.
class syncer_log {
 public:
  /// `sink` is the syncer's and outlives this.
  explicit syncer_log(const std::function<void(const std::string&)>& sink) : sink_(sink), limit_(categories) {}

  /// Writes `line()` unless its category is over its rate.
  template <class Line>
  void operator()(std::size_t category, Line&& line) {
    if (sink_ && limit_.admit(category, clock::now())) sink_(line());
  }
  template <class Line>
  void operator()(syncer_log_category category, Line&& line) {
    (*this)(static_cast<std::size_t>(category), std::forward<Line>(line));
  }
  template <class Line>
  void operator()(reject_reason why, Line&& line) {
    (*this)(static_cast<std::size_t>(why), std::forward<Line>(line));
  }

  /// Writes `line` whatever the rate (the run's failure and end).
  void always(const std::string& line) const {
    if (sink_) sink_(line);
  }

  /// Writes the summary of the lines held back, when one is due.
  void summary() {
    if (!sink_) return;
    if (auto line = limit_.summary(clock::now(), [](std::size_t c) { return category_name(c); }); !line.empty())
      sink_(line);
  }

  static std::string category_name(std::size_t c) {
    if (c < reject_reason_count) return std::string(to_string(static_cast<reject_reason>(c)));
    switch (static_cast<syncer_log_category>(c)) {
      case syncer_log_category::liveness: return "liveness";
      case syncer_log_category::membership: return "membership";
      case syncer_log_category::rounds: return "rounds";
      default: return "undecodable";
    }
  }

  /// `d` as "12.3 s" (to the tenth of a second).
  static std::string seconds(std::chrono::nanoseconds d) {
    const auto tenths = std::llround(std::chrono::duration<double>(d).count() * 10);
    return std::to_string(tenths / 10) + "." + std::to_string(std::abs(tenths % 10)) + " s";
  }

  /// "kind 3 from learner 1/2": a message's kind, learner and incarnation.
  static std::string describe(const message_header& h) {
    return "kind " + std::to_string(int(h.kind)) + " from learner " + std::to_string(h.learner) + "/" +
           std::to_string(h.incarnation);
  }

 private:
  static constexpr std::size_t categories = static_cast<std::size_t>(syncer_log_category::count_);

  const std::function<void(const std::string&)>& sink_;
  log_limiter limit_;
};

}  // namespace diloco::detail
