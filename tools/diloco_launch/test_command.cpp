// ctest-labels: unit
// The launcher's commands: words split as sh splits them, placeholders
// replaced or refused by name, learner id lists, the environment, output cut
// into lines, and the exit status rule. Expected values written by hand.
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include <diloco_tools/launch/command.hpp>
#include <diloco_tools/launch/lines.hpp>
#include <diloco_tools/launch/supervisor.hpp>

namespace {

namespace launch = diloco_tools::launch;
using words = std::vector<std::string>;

/// The message `f` throws as std::invalid_argument, or "" if it does not.
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(launch_command)

BOOST_AUTO_TEST_CASE(splits_words_as_sh_does) {
  BOOST_TEST(launch::split_command("diloco_syncer  --endpoint {endpoint}\t--H 50") ==
             (words{"diloco_syncer", "--endpoint", "{endpoint}", "--H", "50"}));
  BOOST_TEST(launch::split_command(R"(sh -c 'echo $HOME; exit 3' "a \"b\" c" d\ e '')") ==
             (words{"sh", "-c", "echo $HOME; exit 3", "a \"b\" c", "d e", ""}));
  BOOST_TEST(launch::split_command("   ").empty());
  BOOST_TEST(has(refusal([] { launch::split_command("sh -c 'echo"); }), "unclosed '"));
  BOOST_TEST(has(refusal([] { launch::split_command("a \"b"); }), "unclosed \""));
  BOOST_TEST(has(refusal([] { launch::split_command("a\\"); }), "backslash"));
}

BOOST_AUTO_TEST_CASE(replaces_placeholders) {
  const launch::placeholder_values learner{"tcp://127.0.0.1:5555", 8, 3, 2};
  BOOST_TEST(launch::substitute("--endpoint={endpoint}", learner, "x") == "--endpoint=tcp://127.0.0.1:5555");
  BOOST_TEST(launch::substitute("shard-{id}-of-{learners}.{incarnation}:{port}", learner, "x") ==
             "shard-3-of-8.2:5555");
  BOOST_TEST(launch::substitute("{{id}} {{}}", learner, "x") == "{id} {}");
  BOOST_TEST(launch::substitute(launch::escape_braces("a{b}c"), learner, "x") == "a{b}c");
  BOOST_TEST(launch::substitute("plain", learner, "x") == "plain");
}

BOOST_AUTO_TEST_CASE(refuses_bad_placeholders_by_name) {
  const launch::placeholder_values learner{"tcp://127.0.0.1:5555", 8, 3, 2};
  const launch::placeholder_values syncer{"ipc:///tmp/s", 8, std::nullopt, std::nullopt};
  const auto unknown = refusal([&] { launch::substitute("--rank={rank}", learner, "the learner command"); });
  BOOST_TEST(has(unknown, "unknown placeholder '{rank}' in the learner command"));
  BOOST_TEST(has(unknown, "word '--rank={rank}'"));
  BOOST_TEST(has(refusal([&] { launch::substitute("{id}", syncer, "the syncer command"); }),
                 "{id} has no value in the syncer command"));
  BOOST_TEST(has(refusal([&] { launch::substitute("{port}", syncer, "the syncer command"); }),
                 "{port} of an endpoint without a TCP port ('ipc:///tmp/s')"));
  BOOST_TEST(has(refusal([&] { launch::substitute("{id", learner, "x"); }), "unmatched '{'"));
  BOOST_TEST(has(refusal([&] { launch::substitute("id}", learner, "x"); }), "unmatched '}'"));
}

BOOST_AUTO_TEST_CASE(ports_of_endpoints) {
  BOOST_TEST(launch::port_of("tcp://127.0.0.1:5555").value_or("") == "5555");
  BOOST_TEST(launch::port_of("tcp://[::1]:80").value_or("") == "80");
  BOOST_TEST(!launch::port_of("tcp://host"));
  BOOST_TEST(!launch::port_of("tcp://host:0"));
  BOOST_TEST(!launch::port_of("ipc:///tmp/a:1"));
}

BOOST_AUTO_TEST_CASE(environment_of_a_learner_and_of_the_syncer) {
  BOOST_TEST(launch::environment_of({"tcp://h:1", 4, 2, 3}) ==
             (words{"DILOCO_ENDPOINT=tcp://h:1", "DILOCO_LEARNERS=4", "DILOCO_LEARNER_ID=2", "DILOCO_INCARNATION=3"}));
  BOOST_TEST(launch::environment_of({"tcp://h:1", 4, std::nullopt, std::nullopt}) ==
             (words{"DILOCO_ENDPOINT=tcp://h:1", "DILOCO_LEARNERS=4"}));
}

BOOST_AUTO_TEST_CASE(learner_id_lists) {
  using ids = std::vector<std::uint32_t>;
  BOOST_TEST(launch::parse_ids("4-7", 8, "--learner-ids") == (ids{4, 5, 6, 7}));
  BOOST_TEST(launch::parse_ids("0,2,5-6", 8, "--learner-ids") == (ids{0, 2, 5, 6}));
  BOOST_TEST(launch::parse_ids("7", 8, "--learner-ids") == (ids{7}));
  BOOST_TEST(has(refusal([] { launch::parse_ids("4-8", 8, "--learner-ids"); }),
                 "bad value '4-8' for --learner-ids (learner ids from 0 to 7"));
  BOOST_TEST(has(refusal([] { launch::parse_ids("5-4", 8, "--learner-ids"); }), "A <= B"));
  BOOST_TEST(has(refusal([] { launch::parse_ids("1,0-2", 8, "--learner-ids"); }), "learner 1 is listed twice"));
  BOOST_TEST(has(refusal([] { launch::parse_ids("-1", 8, "--learner-ids"); }), "bad value '-1'"));
  BOOST_TEST(has(refusal([] { launch::parse_ids("", 8, "--learner-ids"); }), "bad value ''"));
}

BOOST_AUTO_TEST_CASE(finds_programs) {
  BOOST_TEST(launch::find_program("sh").has_value());
  BOOST_TEST(!launch::find_program("diloco-no-such-program").has_value());
  BOOST_TEST(!launch::find_program("/nonexistent/sh").has_value());
  BOOST_TEST(!launch::find_program("/").has_value());
}

BOOST_AUTO_TEST_CASE(cuts_output_into_lines) {
  launch::line_splitter lines(8);
  words got;
  auto emit = [&](std::string_view l) { got.emplace_back(l); };
  lines.feed("ab", emit);
  lines.feed("c\nd", emit);
  lines.feed("\n\nxyz", emit);
  BOOST_TEST(got == (words{"abc", "d", ""}));
  lines.finish(emit);
  BOOST_TEST(got == (words{"abc", "d", "", "xyz"}));
  lines.finish(emit);  // nothing left
  BOOST_TEST(got.size() == 4u);
  got.clear();
  lines.feed("0123456789abcdefghij\nk", emit);  // long lines come in pieces of 8 bytes
  lines.finish(emit);
  BOOST_TEST(got == (words{"01234567", "89abcdef", "ghij", "k"}));
}

BOOST_AUTO_TEST_CASE(worst_status_rule) {
  using diloco_tools::exit_status;
  const exit_status ok{true, 0, 0}, three{true, 3, 0}, killed{false, 0, 9};
  launch::launch_report r;
  r.has_syncer = true;
  r.syncer = ok;
  r.learners = {{0, 2, 1, ok}, {1, 1, 0, ok}};
  BOOST_TEST(launch::worst_status(r) == 0);  // a restarted learner that ended well is fine
  r.learners[1].status = three;
  BOOST_TEST(launch::worst_status(r) == 3);
  r.learners[0].status = killed;
  BOOST_TEST(launch::worst_status(r) == 137);  // the largest: 128 + SIGKILL
  r.syncer = exit_status{true, 1, 0};
  BOOST_TEST(launch::worst_status(r) == 1);  // the syncer's status first
  r.syncer.reset();                          // a syncer that could not start
  BOOST_TEST(launch::worst_status(r) == 127);
  r.has_syncer = false;  // --no-syncer
  BOOST_TEST(launch::worst_status(r) == 137);
  r.learners[0].status.reset();  // never started
  r.learners[1].status = ok;
  BOOST_TEST(launch::worst_status(r) == 127);
  r.interrupted_by = 2;
  BOOST_TEST(launch::worst_status(r) == 130);  // SIGINT
}

BOOST_AUTO_TEST_SUITE_END()
