// JSON in the tools, written with nlohmann/json: the fields of a trace line
// (for diloco::trace_writer, so this header needs the library's include
// directory), measured numbers in a result line. Tool code, not the library.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <diloco/metrics/trace.hpp>
#include <nlohmann/json.hpp>

namespace diloco_tools {

/// The members of `object`, in its order, as diloco::trace_writer::write
/// takes them: each value serialized by nlohmann/json (which escapes its
/// strings, bytes that are not UTF-8 replaced by U+FFFD), each key by
/// diloco::json_fields. Nothing for a non-object.
inline diloco::json_fields trace_fields(const nlohmann::ordered_json& object) {
  diloco::json_fields fields;
  if (!object.is_object()) return fields;
  for (const auto& [key, value] : object.items())
    fields.add_serialized(key, value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  return fields;
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
