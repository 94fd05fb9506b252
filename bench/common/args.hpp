// Command-line values shared by the benchmarks.
#pragma once

#include <charconv>
#include <cstddef>
#include <optional>
#include <string_view>
#include <system_error>

namespace bench {

/// "64K", "1M", "2G" or a plain byte count (binary units, at least 1);
/// nothing for anything else.
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
  if (ec != std::errc{} || end != s.data() + s.size() || v == 0) return std::nullopt;
  return v << shift;
}

}  // namespace bench
