// Command lines read with CLI11, for the tools, the example trainers and the
// benchmarks: one exit status for every way a parse ends, and numbers checked
// against the values their option takes, with a message that names the
// value and what the option takes. CLI11 2.1 alone lets through what a user
// gets wrong the obvious way: "-1" for a std::uint64_t wraps around to
// 2^64 - 1, and NaN passes CLI::Range. Tool code, not the library.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace diloco_tools {

/// Exit status for a command line that makes no sense (CLI11's own codes are
/// 100 and up).
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

/// The values a numeric option takes: `min` to `max`, either end included
/// unless `open_min` / `open_max` says otherwise. Floating-point values must
/// also be finite (NaN is in no interval; `max` at its default means no upper
/// bound but still refuses infinity).
template <class T>
struct interval {
  T min = std::numeric_limits<T>::lowest();
  T max = std::numeric_limits<T>::max();
  bool open_min = false;
  bool open_max = false;

  bool contains(T v) const { return (open_min ? v > min : v >= min) && (open_max ? v < max : v <= max); }

  /// For error messages: "a whole number from 1 to 1024", "a number in [0, 1)".
  std::string words() const {
    std::ostringstream out;
    if constexpr (std::is_integral_v<T>) {
      out << "a whole number";
      if (max == std::numeric_limits<T>::max())
        out << " >= " << +min;
      else
        out << " from " << +min << " to " << +max;
    } else if (max == std::numeric_limits<T>::max()) {
      out << "a number " << (open_min ? "> " : ">= ") << min;
    } else {
      out << "a number in " << (open_min ? '(' : '[') << min << ", " << max << (open_max ? ')' : ']');
    }
    return out.str();
  }
};

/// `text` as a T in `values`, or nothing: not a number, trailing characters,
/// a sign on an unsigned type, hex, out of range, not finite.
template <class T>
std::optional<T> number_in(std::string_view text, const interval<T>& values) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !values.contains(v)) return std::nullopt;
  return v;
}

/// `text` as a T in `values`; anything else is refused with
/// "bad value 'TEXT' for FLAG (what it takes)".
template <class T>
T parse_number(const std::string& flag, std::string_view text, const interval<T>& values) {
  if (auto v = number_in(text, values)) return *v;
  throw CLI::ValidationError("bad value '" + std::string(text) + "' for " + flag + " (" + values.words() + ")");
}

/// A CLI11 check that the option's value is a T in `values` (CLI11 names the
/// flag before the message).
template <class T>
CLI::Validator in(interval<T> values) {
  return CLI::Validator(
      [values](std::string& text) -> std::string {
        return number_in(text, values) ? std::string() : "bad value '" + text + "' (" + values.words() + ")";
      },
      "");
}

/// A finite number >= 0.
inline CLI::Validator non_negative() { return in(interval<double>{0.0}); }

/// A finite number > 0.
inline CLI::Validator positive() { return in(interval<double>{.min = 0.0, .open_min = true}); }

/// A whole number >= `min` in decimal digits: refuses a sign, hex and
/// exponents. Whether it fits its variable CLI11 checks afterwards.
inline CLI::Validator whole_at_least(std::uint64_t min) { return in(interval<std::uint64_t>{min}); }

/// `flag VALUE` read as a T in `values` into `into`.
template <class T>
CLI::Option* add_number(CLI::App& app, const std::string& flag, T& into, interval<T> values, const std::string& help,
                        const std::string& type_name) {
  return app
      .add_option_function<std::string>(
          flag, [flag, &into, values](const std::string& text) { into = parse_number(flag, text, values); }, help)
      ->type_name(type_name);
}

/// `flag NAME` with NAME one of `choices`, stored into `into`; anything else
/// is refused with "unknown WHAT 'NAME' (a, b or c)".
template <class T>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, T& into, std::vector<std::pair<std::string, T>> choices,
                        const std::string& what, const std::string& help) {
  std::string names, type_name;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
    type_name += (i == 0 ? "" : "|") + choices[i].first;
  }
  return app
      .add_option_function<std::string>(
          flag,
          [&into, choices, what, names](const std::string& text) {
            for (const auto& [name, value] : choices)
              if (text == name) {
                into = value;
                return;
              }
            throw CLI::ValidationError("unknown " + what + " '" + text + "' (" + names + ")");
          },
          help)
      ->type_name(type_name);
}

/// The parts of `text` between `separator`s (empty parts included).
inline std::vector<std::string_view> split_list(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const auto next = text.find(separator, at);
    parts.push_back(text.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) return parts;
    at = next + 1;
  }
}

/// `v` as an option's help shows a default.
inline std::string shown(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

/// "64K", "1M", "2G" or a plain count (binary units, at least 1); nothing for
/// anything else: a sign, a fraction, zero, a count that overflows.
inline std::optional<std::size_t> parse_size(std::string_view s) {
  std::size_t shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k': shift = 10; break;
      case 'M':
      case 'm': shift = 20; break;
      case 'G':
      case 'g': shift = 30; break;
      default: break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  const auto v = number_in(s, interval<std::size_t>{.min = 1, .max = std::numeric_limits<std::size_t>::max() >> shift});
  if (!v) return std::nullopt;
  return *v << shift;
}

/// A CLI11 transform: reads each value as `parse_size` does and replaces it
/// with the count; refuses one that is not a multiple of `multiple`.
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

}  // namespace diloco_tools
