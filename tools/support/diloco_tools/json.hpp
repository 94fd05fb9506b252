// JSON in the tools, written with nlohmann/json: the fields of a trace line,
// measured numbers in a result line. Tool code, not the library.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

namespace diloco_tools {

/// The members of `object` as diloco::trace_writer::write takes them: empty,
/// or `,"key":value,...` in the object's order.
inline std::string trace_fields(const nlohmann::ordered_json& object) {
  if (!object.is_object() || object.empty()) return {};
  std::string members = object.dump();  // {"key":value,...}
  members.front() = ',';
  members.pop_back();
  return members;
}

/// `v` to six significant digits, as a result line shows a measurement (no
/// more precise than that); zero, infinities and NaN unchanged.
inline double six_digits(double v) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return std::strtod(text, nullptr);
}

}  // namespace diloco_tools
