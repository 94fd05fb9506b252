// The command lines a launcher starts: a command given as one string split
// into words as a shell would (quotes, backslashes; no expansion), the
// placeholders `{endpoint}`, `{port}`, `{learners}`, `{id}`, `{incarnation}`
// replaced in each word, learner id lists ("0-3,6"), and programs looked up in
// PATH before anything starts. Tool code (diloco_launch, fashion_mnist
// --role all), not the library; errors are `std::invalid_argument` with a
// message that names the offending text.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <diloco_tools/cli.hpp>

namespace diloco_tools::launch {

/// The words of `text` as `sh` splits them: whitespace separates words,
/// 'single quotes' keep everything, "double quotes" keep everything but
/// `\"` and `\\`, and a backslash outside quotes keeps the next character.
/// Nothing is expanded (`$`, `*`, `~` stay as they are). Throws for an
/// unclosed quote or a trailing backslash.
inline std::vector<std::string> split_command(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (++i == text.size()) throw std::invalid_argument("a command ends with a lone backslash: " + std::string(text));
      word += text[i];
    } else if (c == '\'') {
      const auto end = text.find('\'', i + 1);
      if (end == std::string_view::npos) throw std::invalid_argument("unclosed ' in the command: " + std::string(text));
      word.append(text.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i == text.size()) throw std::invalid_argument("unclosed \" in the command: " + std::string(text));
        if (text[i] == '"') break;
        if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) ++i;
        word += text[i];
      }
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

/// The values the placeholders of one process's command stand for. `id` and
/// `incarnation` exist for learners only: the syncer's command may not use them.
struct placeholder_values {
  std::string endpoint;                      ///< {endpoint}
  std::uint32_t learners = 0;                ///< {learners}: M, the number of learners of the run
  std::optional<std::uint32_t> id;           ///< {id}: the learner id, 0 … M−1
  std::optional<std::uint32_t> incarnation;  ///< {incarnation}: 1 at the first start, +1 at every restart
};

/// The port of a "tcp://HOST:PORT" endpoint, or nothing (ipc, inproc, no port).
inline std::optional<std::string> port_of(std::string_view endpoint) {
  if (!endpoint.starts_with("tcp://")) return std::nullopt;
  const auto colon = endpoint.rfind(':');
  if (colon == std::string_view::npos || colon < 6) return std::nullopt;
  const auto port = endpoint.substr(colon + 1);
  if (!number_in(port, interval<std::uint32_t>{1, 65535})) return std::nullopt;
  return std::string(port);
}

/// `word` with every placeholder replaced; `{{` and `}}` stand for literal
/// braces. `what` names the command in errors ("the learner command").
/// Throws for an unknown placeholder, one this process has no value for
/// (`{id}` in the syncer's command, `{port}` of an ipc endpoint) and an
/// unmatched brace.
inline std::string substitute(std::string_view word, const placeholder_values& v, std::string_view what) {
  std::string out;
  auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(why + " in " + std::string(what) + " (word '" + std::string(word) +
                                "'; placeholders: {endpoint}, {port}, {learners}, {id}, {incarnation}; {{ and }} "
                                "for braces)");
  };
  for (std::size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    if (c == '}') {
      if (i + 1 < word.size() && word[i + 1] == '}')
        ++i;
      else
        refuse("unmatched '}'");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < word.size() && word[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const auto end = word.find('}', i);
    if (end == std::string_view::npos) refuse("unmatched '{'");
    const auto name = word.substr(i + 1, end - i - 1);
    if (name == "endpoint") {
      out += v.endpoint;
    } else if (name == "port") {
      const auto port = port_of(v.endpoint);
      if (!port) refuse("{port} of an endpoint without a TCP port ('" + v.endpoint + "')");
      out += *port;
    } else if (name == "learners") {
      out += std::to_string(v.learners);
    } else if (name == "id" || name == "incarnation") {
      const auto value = name == "id" ? v.id : v.incarnation;
      if (!value) refuse("{" + std::string(name) + "} has no value");
      out += std::to_string(*value);
    } else {
      refuse("unknown placeholder '{" + std::string(name) + "}'");
    }
    i = end;
  }
  return out;
}

/// Every word of `words` substituted.
inline std::vector<std::string> substitute(const std::vector<std::string>& words, const placeholder_values& v,
                                           std::string_view what) {
  std::vector<std::string> out;
  for (const auto& w : words) out.push_back(substitute(w, v, what));
  return out;
}

/// `text` with its braces doubled, so that `substitute` gives it back as it is.
inline std::string escape_braces(std::string_view text) {
  std::string out;
  for (const char c : text) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

/// The "NAME=VALUE" entries a process gets besides its placeholders:
/// DILOCO_ENDPOINT and DILOCO_LEARNERS, and for a learner DILOCO_LEARNER_ID
/// and DILOCO_INCARNATION.
inline std::vector<std::string> environment_of(const placeholder_values& v) {
  std::vector<std::string> env{"DILOCO_ENDPOINT=" + v.endpoint, "DILOCO_LEARNERS=" + std::to_string(v.learners)};
  if (v.id) env.push_back("DILOCO_LEARNER_ID=" + std::to_string(*v.id));
  if (v.incarnation) env.push_back("DILOCO_INCARNATION=" + std::to_string(*v.incarnation));
  return env;
}

/// The learner ids `text` lists: "4-7", "0,2,5", "0-1,6"; each below
/// `learners`, none twice, in the order given. Throws naming `flag` and the
/// part that is wrong.
inline std::vector<std::uint32_t> parse_ids(std::string_view text, std::uint32_t learners, const std::string& flag) {
  std::vector<std::uint32_t> ids;
  std::set<std::uint32_t> seen;
  const interval<std::uint32_t> values{0, learners == 0 ? 0 : learners - 1};
  auto refuse = [&](std::string_view part, const std::string& why) {
    throw std::invalid_argument("bad value '" + std::string(part) + "' for " + flag + " (" + why + ")");
  };
  for (const auto part : split_list(text, ',')) {
    const auto dash = part.find('-');
    const auto first = number_in(part.substr(0, dash), values);
    const auto last = dash == std::string_view::npos ? first : number_in(part.substr(dash + 1), values);
    if (!first || !last)
      refuse(part, "learner ids from 0 to " + std::to_string(values.max) + " (--learners " + std::to_string(learners) +
                       "), one id or a range A-B, separated by commas");
    if (*last < *first) refuse(part, "a range A-B needs A <= B");
    for (auto id = *first; id <= *last; ++id) {
      if (!seen.insert(id).second) refuse(part, "learner " + std::to_string(id) + " is listed twice");
      ids.push_back(id);
    }
  }
  return ids;
}

/// Where `program` runs from: itself if it names a path (holds a '/'), else
/// the first executable of that name in PATH; nothing if there is none.
inline std::optional<std::filesystem::path> find_program(const std::string& program) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos)
    return ::access(program.c_str(), X_OK) == 0 && !std::filesystem::is_directory(program)
               ? std::optional<std::filesystem::path>(program)
               : std::nullopt;
  const char* path = std::getenv("PATH");
  for (const auto dir : split_list(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    const auto candidate = std::filesystem::path(dir.empty() ? "." : std::string(dir)) / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace diloco_tools::launch
