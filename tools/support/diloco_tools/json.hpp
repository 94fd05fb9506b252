// JSON in the tools, written with nlohmann/json: the fields of a trace line.
// Tool code, not the library.
#pragma once

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

}  // namespace diloco_tools
