// ctest-labels: unit
// The trace's JSON: strings holding quotes, backslashes, control characters
// and UTF-8 written by `json_fields` through a `trace_writer` to a file, read
// back and parsed by nlohmann/json (an independent parser), come back equal
// to what was written; numbers likewise, NaN and infinities as null; bytes
// that are not UTF-8 become U+FFFD instead of breaking the line.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <diloco/metrics/trace.hpp>
#include <nlohmann/json.hpp>

namespace metrics_trace_json_test {

using diloco::json_fields;
using diloco::trace_writer;

/// A trace file of its own, removed at the end.
struct trace_file {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("diloco_trace_json_" + std::to_string(::getpid()) + ".jsonl");
  trace_file() { std::filesystem::remove(path); }
  ~trace_file() { std::filesystem::remove(path); }

  /// Every line of the file.
  std::vector<std::string> lines() const {
    std::ifstream in(path);
    std::vector<std::string> all;
    for (std::string l; std::getline(in, l);) all.push_back(l);
    return all;
  }
};

/// The strings a trace field may hold: quotes, backslashes, the control
/// characters JSON has short escapes for and two it has not, a DEL, and
/// 2-, 3- and 4-byte UTF-8 (é, €, 😀).
const std::vector<std::string> hard_strings{
    "plain",
    "a \"quoted\" word",
    R"(C:\path\to\file and \\server\share)",
    "line one\nline two\r\n\ttabbed",
    std::string("bell \x01 unit separator \x1f nul ") + '\0' + " end",
    "backspace \b form feed \f delete \x7f",
    "caf\xc3\xa9 \xe2\x82\xac 5 \xf0\x9f\x98\x80",
    "",
    "}\",\"ev\":\"forged",
};

BOOST_AUTO_TEST_SUITE(metrics_trace_json)

BOOST_AUTO_TEST_CASE(strings_round_trip_through_a_trace_file) {
  trace_file file;
  {
    trace_writer trace(file.path);
    for (std::size_t i = 0; i < hard_strings.size(); ++i) {
      json_fields f;
      f.add("index", i).add("value", hard_strings[i]).add(hard_strings[i], "as a key");
      trace.write("test", hard_strings[i], f);
    }
  }
  const auto lines = file.lines();
  BOOST_TEST_REQUIRE(lines.size() == hard_strings.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    BOOST_TEST_INFO("line " << i << ": " << lines[i]);
    const auto parsed = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    BOOST_TEST_REQUIRE(parsed.is_object());
    BOOST_TEST(parsed.at("src").get<std::string>() == "test");
    BOOST_TEST(parsed.at("ev").get<std::string>() == hard_strings[i]);
    BOOST_TEST(parsed.at("index").get<std::size_t>() == i);
    BOOST_TEST(parsed.at("value").get<std::string>() == hard_strings[i]);
    BOOST_TEST(parsed.at(hard_strings[i]).get<std::string>() == "as a key");
    BOOST_TEST(parsed.size() == 6u);  // t, src, ev, index, value, the string as a key
  }
}

BOOST_AUTO_TEST_CASE(control_characters_are_escaped_not_raw) {
  // RFC 8259 §7: characters below 0x20 must be escaped; a raw one is not JSON.
  json_fields f;
  f.add("s", std::string("\x01\x1f\n\t\"\\") + '\0');
  BOOST_TEST(f.text() == R"(,"s":"\u0001\u001f\n\t\"\\\u0000")");
  for (const char c : f.text()) BOOST_TEST(static_cast<unsigned char>(c) >= 0x20u);
}

BOOST_AUTO_TEST_CASE(numbers_bools_and_arrays_round_trip) {
  trace_file file;
  const std::vector<std::uint64_t> revisions{0, 7, std::numeric_limits<std::uint64_t>::max()};
  const std::vector<std::vector<std::int64_t>> nested{{-1, 2}, {}, {3}};
  const std::vector<std::string> names{"a\"b", "c\nd"};
  {
    trace_writer trace(file.path);
    json_fields f;
    f.add("min", std::numeric_limits<std::int64_t>::min())
        .add("max", std::numeric_limits<std::uint64_t>::max())
        .add("third", 1.0 / 3.0)
        .add("small", 6.02e-23)
        .add("float", 0.1f)
        .add("nan", std::numeric_limits<double>::quiet_NaN())
        .add("inf", -std::numeric_limits<double>::infinity())
        .add("yes", true)
        .add("no", false)
        .add("revisions", revisions)
        .add("nested", nested)
        .add("names", names)
        .add_serialized("object", R"({"k":[1,2]})");
    trace.learner_line(3, 2, "numbers", f);
  }
  const auto lines = file.lines();
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  BOOST_TEST_INFO(lines[0]);
  const auto p = nlohmann::json::parse(lines[0], nullptr, /*allow_exceptions=*/false);
  BOOST_TEST_REQUIRE(p.is_object());
  BOOST_TEST(p.at("src").get<std::string>() == "learner");
  BOOST_TEST(p.at("learner").get<int>() == 3);
  BOOST_TEST(p.at("incarnation").get<int>() == 2);
  BOOST_TEST(p.at("min").get<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  BOOST_TEST(p.at("max").get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max());
  BOOST_TEST(p.at("third").get<double>() == 1.0 / 3.0);  // shortest form that reads back the same double
  BOOST_TEST(p.at("small").get<double>() == 6.02e-23);
  BOOST_TEST(p.at("float").get<double>() == static_cast<double>(0.1f));
  BOOST_TEST(p.at("nan").is_null());
  BOOST_TEST(p.at("inf").is_null());
  BOOST_TEST(p.at("yes").get<bool>() == true);
  BOOST_TEST(p.at("no").get<bool>() == false);
  BOOST_TEST(p.at("revisions").get<std::vector<std::uint64_t>>() == revisions);
  BOOST_TEST((p.at("nested").get<std::vector<std::vector<std::int64_t>>>() == nested));
  BOOST_TEST(p.at("names").get<std::vector<std::string>>() == names);
  BOOST_TEST(p.at("object").at("k").get<std::vector<int>>() == (std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_CASE(a_unit_rank_names_itself_on_every_learner_line) {
  trace_file file;
  {
    trace_writer one_process(file.path);
    one_process.learner_line(4, 1, "start");
    trace_writer rank(file.path);
    rank.unit_rank(1, 2);
    trace_writer moved(std::move(rank));
    moved.learner_line(4, 2, "start");
    diloco::learner_event sent{.what = diloco::learner_event::kind::sent, .fragment = 3, .sequence = 8};
    moved.learner(4, 2, sent);
    moved.write("syncer", "merged");  // not a learner line: no rank
  }
  const auto lines = file.lines();
  BOOST_TEST_REQUIRE(lines.size() == 4u);
  std::vector<nlohmann::json> p;
  for (const auto& l : lines) p.push_back(nlohmann::json::parse(l));
  BOOST_TEST(!p[0].contains("rank"));
  BOOST_TEST(!p[0].contains("ranks"));
  for (int k : {1, 2}) {
    BOOST_TEST_INFO(lines[k]);
    BOOST_TEST(p[k].at("learner").get<int>() == 4);
    BOOST_TEST(p[k].at("incarnation").get<int>() == 2);
    BOOST_TEST(p[k].at("rank").get<int>() == 1);
    BOOST_TEST(p[k].at("ranks").get<int>() == 2);
  }
  BOOST_TEST(p[2].at("ev").get<std::string>() == "sent");
  BOOST_TEST(p[2].at("sequence").get<int>() == 8);
  BOOST_TEST(!p[3].contains("rank"));
}

BOOST_AUTO_TEST_CASE(bytes_that_are_not_utf8_become_replacement_characters) {
  // A lone continuation byte, a truncated 3-byte sequence, an overlong "/",
  // a UTF-16 surrogate and a byte never used in UTF-8. The expected text is
  // what Python's decoder makes of the same bytes (bytes.decode("utf-8",
  // "replace"): one U+FFFD per maximal subpart), the valid text around them
  // kept.
  const std::string bad = std::string("a\x80") + "b\xe2\x82" + "c\xc0\xaf" + "d\xed\xa0\x80" + "e\xff";
  const std::string fffd = "\xef\xbf\xbd";
  const std::string expected = "a" + fffd + "b" + fffd + "c" + fffd + fffd + "d" + fffd + fffd + fffd + "e" + fffd;
  trace_file file;
  {
    trace_writer trace(file.path);
    trace.write("test", "bad", json_fields().add("s", bad));
  }
  const auto lines = file.lines();
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  const auto p = nlohmann::json::parse(lines[0], nullptr, /*allow_exceptions=*/false);
  BOOST_TEST_REQUIRE(p.is_object());
  BOOST_TEST(p.at("s").get<std::string>() == expected);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace metrics_trace_json_test
