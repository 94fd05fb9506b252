#pragma once
// Reads a chaos run's trace (docs/chaos.md: JSON lines, one flat object per line, written by the runner, the syncer
// and the learners) into events, parsing each line with nlohmann/json.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace diloco_chaos {

/// A field value: integer, float, bool, string, array of integers, array of arrays of integers (`[]` reads as an
/// empty array of integers).
using value = std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>,
                           std::vector<std::vector<std::int64_t>>>;

/// One trace line. Fields of other JSON types (null, objects, float arrays) are valid JSON but dropped.
struct event {
  std::int64_t t = 0;  ///< wall clock, microseconds since the Unix epoch
  std::string src, ev;
  std::map<std::string, value, std::less<>> fields;  ///< every field but t, src and ev

  /// The field `key` if present and of type T, else nullptr.
  template <class T>
  const T* get(std::string_view key) const {
    const auto it = fields.find(key);
    return it == fields.end() ? nullptr : std::get_if<T>(&it->second);
  }
  std::optional<std::int64_t> integer(std::string_view key) const {
    const auto* i = get<std::int64_t>(key);
    return i ? std::optional(*i) : std::nullopt;
  }
  /// An integer or float field as a double; `fallback` when absent or of another type.
  double number(std::string_view key, double fallback = 0) const {
    const auto* d = get<double>(key);
    return d ? *d : integer(key) ? static_cast<double>(*integer(key)) : fallback;
  }
  std::string_view text(std::string_view key) const {
    const auto* s = get<std::string>(key);
    return s ? std::string_view(*s) : std::string_view();
  }
  bool flag(std::string_view key) const {
    const bool* b = get<bool>(key);
    return b && *b;
  }
  const std::vector<std::int64_t>& integers(std::string_view key) const {
    static const std::vector<std::int64_t> none;
    const auto* a = get<std::vector<std::int64_t>>(key);
    return a ? *a : none;
  }
  const std::vector<std::vector<std::int64_t>>& rows(std::string_view key) const {
    static const std::vector<std::vector<std::int64_t>> none;
    const auto* a = get<std::vector<std::vector<std::int64_t>>>(key);
    return a ? *a : none;
  }
};

/// A JSON number that is an integer and fits an int64 (nlohmann reads non-negative integers as unsigned).
inline std::optional<std::int64_t> as_int64(const nlohmann::json& j) {
  if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<std::int64_t>();
  if (j.is_number_unsigned() && j.get<std::uint64_t>() <= std::uint64_t{std::numeric_limits<std::int64_t>::max()})
    return static_cast<std::int64_t>(j.get<std::uint64_t>());
  return std::nullopt;
}

/// `[int, ...]` as integers; nothing if any element is something else.
inline std::optional<std::vector<std::int64_t>> as_int64_array(const nlohmann::json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<std::int64_t> out;
  for (const auto& x : j) {
    const auto i = as_int64(x);
    if (!i) return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

/// The field as a `value`, or nothing for a JSON type that `value` does not hold. An integer beyond int64 reads as
/// a float; an array is integers, or arrays of integers, or dropped.
inline std::optional<value> to_value(const nlohmann::json& j) {
  if (const auto i = as_int64(j)) return value(*i);
  if (j.is_number()) return value(j.get<double>());
  if (j.is_boolean()) return value(j.get<bool>());
  if (j.is_string()) return value(j.get<std::string>());
  if (!j.is_array()) return std::nullopt;
  if (j.empty() || !j.front().is_array()) {
    if (auto flat = as_int64_array(j)) return value(std::move(*flat));
    return std::nullopt;
  }
  std::vector<std::vector<std::int64_t>> rows;
  for (const auto& row : j) {
    auto r = as_int64_array(row);
    if (!r) return std::nullopt;
    rows.push_back(std::move(*r));
  }
  return value(std::move(rows));
}

/// Parses one trace line: nullopt unless it is one JSON object with an integer "t" and string "src" and "ev".
/// A repeated key keeps its last value.
inline std::optional<event> parse_line(std::string_view line) {
  const auto json = nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;  // also a syntax error: parse() gives a "discarded" value
  event e;
  for (const auto& [key, field] : json.items())
    if (auto v = to_value(field)) e.fields.insert_or_assign(key, std::move(*v));
  const std::int64_t* t = e.get<std::int64_t>("t");
  const std::string *src = e.get<std::string>("src"), *ev = e.get<std::string>("ev");
  if (!t || !src || !ev) return std::nullopt;
  e.t = *t, e.src = *src, e.ev = *ev;
  for (const char* k : {"t", "src", "ev"}) e.fields.erase(e.fields.find(std::string_view(k)));
  return e;
}

/// A whole trace: the events sorted by t, ties in file order. Blank lines are skipped, not counted as malformed.
struct trace {
  std::vector<event> events;
  std::size_t malformed_lines = 0;
};

/// Reads a JSON-lines trace. Throws std::runtime_error naming the file if it cannot be opened.
inline trace read_trace(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("diloco_chaos: cannot open trace " + path.string());
  trace out;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (auto e = parse_line(line))
      out.events.push_back(std::move(*e));
    else
      ++out.malformed_lines;
  }
  std::stable_sort(out.events.begin(), out.events.end(), [](const event& a, const event& b) { return a.t < b.t; });
  return out;
}

}  // namespace diloco_chaos
