// The syncer's CURVE allow-list for diloco::zeromq: which learners' public
// keys it admits and the learner ids each may speak for, read from a file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diloco/transport/zeromq/keys.hpp"
#include "diloco/transport/zeromq/learner_ids.hpp"

namespace diloco::zeromq {

/// An allow-list entry: a learner's CURVE public key and the learner ids
/// that a connection authenticated with it may name in its messages.
struct allowed_key {
  std::string public_key;  ///< 40 characters of Z85
  learner_ids learners;

  allowed_key(std::string key, learner_ids ids) : public_key(std::move(key)), learners(std::move(ids)) {}
};

/// Reads an allow-list: one or more entries, each a line
/// `public-key = <40 Z85 characters>` followed by a line
/// `learners = <ids>` (`0-3,7`, or `*` for any learner) for that key. Blank
/// lines and whole lines starting with `#` are ignored, so a `.pub` file
/// written with `diloco_keygen NAME --learners IDS` is an allow-list, and so
/// are several of them concatenated. Throws `std::runtime_error` naming the
/// file and the line for a missing `learners` line, a malformed key or id
/// set, a key listed twice, a secret key, an unknown field or no key at all.
inline std::vector<allowed_key> load_allow_list(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("diloco::zeromq: cannot read allow-list " + path.string());
  const auto fail = [&path](std::size_t line, const std::string& why) {
    return std::runtime_error("diloco::zeromq: " + path.string() + ":" + std::to_string(line) + ": " + why);
  };
  struct pending {
    std::string key;
    std::size_t line;
    std::optional<learner_ids> learners;
  };
  std::vector<pending> entries;
  const auto require_learners = [&](const pending& p) {
    if (!p.learners)
      throw fail(p.line,
                 "the key has no 'learners = ...' line after it; add 'learners = <ids>' (like 0-3,7) "
                 "for the learner ids it may speak for, or 'learners = *' to let it speak for any learner");
  };
  std::size_t number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    const std::string line = detail::trim(text);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw fail(number, "expected 'name = value', found '" + line + "'");
    const std::string name = detail::trim(std::string_view(line).substr(0, eq));
    const std::string value = detail::trim(std::string_view(line).substr(eq + 1));
    if (name == "public-key") {
      if (!detail::decode_key(value)) throw fail(number, "'" + value + "' is not a public key (40 Z85 characters)");
      for (const auto& e : entries)
        if (e.key == value) throw fail(number, "this key is already listed on line " + std::to_string(e.line));
      if (!entries.empty()) require_learners(entries.back());
      entries.push_back({value, number, std::nullopt});
    } else if (name == "learners") {
      if (entries.empty()) throw fail(number, "'learners' before any 'public-key' line");
      if (entries.back().learners)
        throw fail(number, "a second 'learners' line for the key on line " + std::to_string(entries.back().line));
      try {
        entries.back().learners = learner_ids::parse(value);
      } catch (const std::invalid_argument& e) {
        throw fail(number, e.what());
      }
    } else if (name == "secret-key") {
      throw fail(number, "a secret key has no place in an allow-list: give the learner's .pub file, not its .key");
    } else {
      throw fail(number, "unknown field '" + name + "' (expected 'public-key' or 'learners')");
    }
  }
  if (entries.empty()) throw std::runtime_error("diloco::zeromq: " + path.string() + " has no 'public-key = ...' line");
  require_learners(entries.back());
  std::vector<allowed_key> list;
  list.reserve(entries.size());
  for (auto& e : entries) list.emplace_back(std::move(e.key), std::move(*e.learners));
  return list;
}

}  // namespace diloco::zeromq
