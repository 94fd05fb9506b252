// The tools' command lines, read with CLI11: one exit status for every way a
// parse ends, and checks on numbers that name the flag they refuse, including
// what CLI11 2.1 lets through by itself (for a std::uint64_t, "-1" wraps
// around to 2^64 - 1; NaN passes CLI::Range). Tool code, not the library.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

namespace diloco_tools {

/// Exit status for a command line that makes no sense, as every tool used
/// before CLI11 (CLI11's own codes are 100 and up).
inline constexpr int bad_usage = 2;

/// Reads `argv` into `app`. Nothing when the program is to go on; otherwise
/// its exit status: 0 after printing the help (-h, --help) to stdout, or
/// `bad_usage` after printing what is wrong (the flag and the value) to stderr.
inline std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n(" << app.get_name() << " --help lists the options)\n";
    return bad_usage;
  }
}

/// Whether a bound of `real_in` belongs to the interval.
enum class bound { closed, open };

/// A finite number in the interval from `lo` to `hi` (each end closed or
/// open); the message names the interval. Infinite `hi`: no upper bound, but
/// the number must still be finite.
inline CLI::Validator real_in(double lo, bound lo_bound, double hi, bound hi_bound) {
  const auto show = [](double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return s;
  };
  std::string range = lo_bound == bound::closed ? "[" : "(";
  range += show(lo) + ", " + (std::isinf(hi) ? std::string("inf") : show(hi)) + (hi_bound == bound::closed ? "]" : ")");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
          return "'" + text + "' is not a finite number";
        const bool above = lo_bound == bound::closed ? v >= lo : v > lo;
        const bool below = hi_bound == bound::closed ? v <= hi : v < hi;
        return above && below ? std::string() : "must be in " + range + ", not " + text;
      },
      "");
}

/// A finite number >= 0.
inline CLI::Validator non_negative() {
  return real_in(0, bound::closed, std::numeric_limits<double>::infinity(), bound::open);
}

/// A finite number > 0.
inline CLI::Validator positive() {
  return real_in(0, bound::open, std::numeric_limits<double>::infinity(), bound::open);
}

/// A whole number >= `min` in decimal digits: refuses a sign, hex and
/// exponents. Whether it fits its variable CLI11 checks afterwards.
inline CLI::Validator whole_at_least(std::uint64_t min) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "must be a whole number >= " + std::to_string(min) + ", not " + text;
        errno = 0;
        const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE) return "'" + text + "' is out of range";
        return v >= min ? std::string() : "must be at least " + std::to_string(min) + ", not " + text;
      },
      "");
}

}  // namespace diloco_tools
