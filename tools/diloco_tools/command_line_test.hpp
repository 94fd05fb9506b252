// For the tools' command-line tests (Boost.Test): a parse function run on
// given words with what it writes captured, and the check that it refused
// them the way the tools refuse bad usage.
#pragma once

#include <boost/test/unit_test.hpp>

#include <initializer_list>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace diloco_tools::testing {

/// What `parse_command_line` made of a command line.
template <class Command>
struct parsed {
  std::optional<int> status;  ///< nothing: go on; else the exit status
  std::string error;          ///< what went to stderr
  std::string output;         ///< what went to stdout (--help)
  Command c;
};

/// Runs `parse(argc, argv, command)` on `program args…`, with stdout and
/// stderr captured (restored afterwards).
template <class Command, class Parse>
parsed<Command> parse_words(Parse&& parse, const char* program, std::initializer_list<const char*> args) {
  std::vector<const char*> argv{program};
  argv.insert(argv.end(), args);
  parsed<Command> p;
  std::ostringstream err, out;
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  p.status = parse(static_cast<int>(argv.size()), argv.data(), p.c);
  std::cerr.rdbuf(old_err);
  std::cout.rdbuf(old_out);
  p.error = err.str();
  p.output = out.str();
  return p;
}

/// Refused as bad usage (exit status 2) with `message` in what it wrote.
template <class Command>
bool refused(const parsed<Command>& p, const std::string& message) {
  BOOST_TEST_INFO("stderr: " << p.error);
  return p.status == 2 && p.error.find(message) != std::string::npos;
}

}  // namespace diloco_tools::testing
