// The benchmarks' command lines: CLI11, plus the two checks its stock
// validators lack here. CLI11 2.1's unsigned conversion reads "-1" as 2^64 - 1
// and its Range lets NaN through, so sizes and seconds are read by the
// validators below, which refuse both.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include <CLI/CLI.hpp>

namespace bench {

/// "64K", "1M", "2G" or a plain count (binary units, at least 1); nothing for
/// anything else: a sign, a fraction, zero, a count that overflows.
inline std::optional<std::size_t> parse_size(std::string_view s) {
  std::size_t shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  std::size_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v == 0 || v > (std::numeric_limits<std::size_t>::max() >> shift))
    return std::nullopt;
  return v << shift;
}

/// Reads each value as `parse_size` does and replaces it with the count;
/// refuses one that is not a multiple of `multiple`.
inline CLI::Validator size_multiple_of(std::size_t multiple) {
  return CLI::Validator(
      [multiple](std::string& text) -> std::string {
        const auto v = parse_size(text);
        if (!v) return "bad value '" + text + "' (a count >= 1, suffixes K, M, G are powers of 2)";
        if (*v % multiple != 0) return "bad value '" + text + "' (not a multiple of " + std::to_string(multiple) + ")";
        text = std::to_string(*v);
        return {};
      },
      "");
}

/// Refuses a value that is not a number from `min` to `max` (NaN included).
inline CLI::Validator number_in(double min, double max) {
  std::ostringstream range;
  range << "a number from " << min << " to " << max;
  return CLI::Validator(
      [min, max, words = range.str()](std::string& text) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !(v >= min && v <= max))
          return "bad value '" + text + "' (" + words + ")";
        return {};
      },
      "");
}

/// Parses the command line into the options `app` binds. Returns nothing to
/// go on, or the exit status to end with: 0 after `--help` (the options on
/// stdout), 2 for a bad command line (the reason on stderr).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\n(%s --help lists the options)\n", app.get_name().c_str(), e.what(),
                 app.get_name().c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace bench
