// Option errors that name the option, its value and the rule it breaks.
#pragma once

#include <chrono>
#include <concepts>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace diloco::detail {

/// `value` as a user wrote it: numbers as numbers (booleans as words),
/// durations in seconds ("0.25 s"), names as they are.
template <class V>
std::string show_option(const V& value) {
  std::ostringstream out;
  if constexpr (std::same_as<V, bool>) {
    out << (value ? "true" : "false");
  } else if constexpr (requires {
                         value.count();
                         typename V::period;
                       }) {
    out << std::chrono::duration<double>(value).count() << " s";
  } else if constexpr (std::convertible_to<const V&, std::string_view>) {
    out << std::string_view(value);  // a name: a codec's, say
  } else {
    out << +value;  // a uint8_t as a number, not a character
  }
  return out.str();
}

/// Throws `std::invalid_argument`: "OWNER: NAME = VALUE: RULE", e.g.
/// "diloco::syncer: overlap tau = 7: must be smaller than the sync period H = 5".
template <class V>
[[noreturn]] void bad_option(std::string_view owner, std::string_view name, const V& value, std::string_view rule) {
  throw std::invalid_argument(std::string(owner) + ": " + std::string(name) + " = " + show_option(value) + ": " +
                              std::string(rule));
}

}  // namespace diloco::detail
