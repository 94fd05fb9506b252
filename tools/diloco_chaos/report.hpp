#pragma once
// Turns a chaos run's event trace (JSON lines, one flat object per line, written by the runner, the syncer and the
// learners) into a report: goodput and global downtime (DESIGN 2.8), accounting of every contribution (DESIGN 2.7,
// no silent loss), revision monotonicity per learner, and the input of the PNG timeline (timeline.hpp).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "timeline.hpp"

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
  template <class T> const T* get(std::string_view key) const {
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
  bool flag(std::string_view key) const { const bool* b = get<bool>(key); return b && *b; }
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

namespace detail {

/// Recursive-descent JSON reader over one line; each method returns false / nullopt on a syntax error.
struct json_cursor {
  std::string_view s;
  std::size_t i = 0;

  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  bool eat(char c) {
    skip_ws();
    return i < s.size() && s[i] == c ? (++i, true) : false;
  }
  bool literal(std::string_view word) {
    skip_ws();
    return s.substr(i, word.size()) == word ? (i += word.size(), true) : false;
  }
  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (i < s.size()) {
      const char c = s[i++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20 || (c == '\\' && i >= s.size())) return std::nullopt;
      if (c != '\\') { out += c; continue; }
      const char e = s[i++];
      if (const auto k = std::string_view("\"\\/bfnrt").find(e); k != std::string_view::npos) {
        out += "\"\\/\b\f\n\r\t"[k];
        continue;
      }
      unsigned u = 0;
      const char* hex = s.data() + i;
      if (e != 'u' || i + 4 > s.size() || std::from_chars(hex, hex + 4, u, 16).ptr != hex + 4) return std::nullopt;
      i += 4;
      const auto byte = [](unsigned b) { return static_cast<char>(b); };
      if (u < 0x80) out += byte(u);
      else if (u < 0x800) out += {byte(0xC0 | u >> 6), byte(0x80 | (u & 0x3F))};
      else out += {byte(0xE0 | u >> 12), byte(0x80 | (u >> 6 & 0x3F)), byte(0x80 | (u & 0x3F))};
    }
    return std::nullopt;
  }
  /// A JSON number: int64 when it has no fraction or exponent and fits, otherwise double.
  std::optional<value> number() {
    skip_ws();
    const std::size_t start = i;
    const auto digits = [&] {
      const std::size_t from = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
      return i - from;
    };
    if (i < s.size() && s[i] == '-') ++i;
    const std::size_t int_start = i, n = digits();
    if (n == 0 || (n > 1 && s[int_start] == '0')) return std::nullopt;
    bool integral = true;
    if (i < s.size() && s[i] == '.' && (++i, integral = false, digits() == 0)) return std::nullopt;
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i, integral = false;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (digits() == 0) return std::nullopt;
    }
    std::int64_t k = 0;
    double d = 0;
    if (integral && std::from_chars(s.data() + start, s.data() + i, k).ec == std::errc()) return value(k);
    if (std::from_chars(s.data() + start, s.data() + i, d).ec != std::errc()) return std::nullopt;
    return value(d);
  }
  /// Validates and discards any JSON value; depth-limited so that garbage cannot exhaust the stack.
  bool skip_value(int depth = 0) {
    skip_ws();
    if (depth > 64 || i >= s.size()) return false;
    const char open = s[i];
    if (open == '"') return string().has_value();
    if (open != '{' && open != '[') return literal("true") || literal("false") || literal("null") || number();
    const char close = open == '{' ? '}' : ']';
    if (++i, eat(close)) return true;
    do
      if ((open == '{' && (!string() || !eat(':'))) || !skip_value(depth + 1)) return false;
    while (eat(','));
    return eat(close);
  }
  /// `[int, ...]` or `[[int, ...], ...]`.
  std::optional<value> int_array() {
    if (!eat('[')) return std::nullopt;
    std::vector<std::int64_t> flat;
    std::vector<std::vector<std::int64_t>> rows;
    if (eat(']')) return value(flat);
    const bool nested = i < s.size() && s[i] == '[';
    do {
      std::optional<value> v = nested ? int_array() : number();
      if (nested && v && std::holds_alternative<std::vector<std::int64_t>>(*v))
        rows.push_back(std::get<std::vector<std::int64_t>>(std::move(*v)));
      else if (!nested && v && std::holds_alternative<std::int64_t>(*v)) flat.push_back(std::get<std::int64_t>(*v));
      else return std::nullopt;
    } while (eat(','));
    if (!eat(']')) return std::nullopt;
    return nested ? value(std::move(rows)) : value(std::move(flat));
  }
  /// Outer nullopt: syntax error. Inner nullopt: valid JSON of a type that `value` does not hold.
  std::optional<std::optional<value>> field_value() {
    skip_ws();
    const std::size_t start = i;
    const char c = i < s.size() ? s[i] : '\0';
    std::optional<value> v;
    if (c == '"') v = string();
    else if (c == '[') v = int_array();
    else if (c == '-' || (c >= '0' && c <= '9')) v = number();
    else if (literal("true") || literal("false")) v = value(s[start] == 't');
    if (v) return v;
    i = start;
    if (!skip_value()) return std::nullopt;
    return std::optional<value>();
  }
};

}  // namespace detail

/// Parses one trace line: nullopt unless it is one JSON object with an integer "t" and string "src" and "ev".
/// A repeated key keeps its last value.
inline std::optional<event> parse_line(std::string_view line) {
  detail::json_cursor c{line};
  event e;
  if (!c.eat('{')) return std::nullopt;
  if (!c.eat('}')) {
    do {
      auto key = c.string();
      std::optional<std::optional<value>> v;
      if (!key || !c.eat(':') || !(v = c.field_value())) return std::nullopt;
      if (*v) e.fields.insert_or_assign(std::move(*key), std::move(**v));
    } while (c.eat(','));
    if (!c.eat('}')) return std::nullopt;
  }
  c.skip_ws();
  const std::int64_t* t = e.get<std::int64_t>("t");
  const std::string *src = e.get<std::string>("src"), *ev = e.get<std::string>("ev");
  if (c.i != line.size() || !t || !src || !ev) return std::nullopt;
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
    if (auto e = parse_line(line)) out.events.push_back(std::move(*e));
    else ++out.malformed_lines;
  }
  std::stable_sort(out.events.begin(), out.events.end(), [](const event& a, const event& b) { return a.t < b.t; });
  return out;
}

struct report_options {
  double downtime_bound_s = 5.0;  ///< a gap between revision advances up to this long is normal cadence, seconds
};

/// A contribution: learner id, incarnation, sequence.
using contribution_key = std::tuple<std::int64_t, std::int64_t, std::int64_t>;

/// One learner id over all its incarnations; times in seconds.
struct learner_report {
  std::int64_t learner = 0;
  std::uint64_t incarnations = 0, sent = 0, merged = 0;  ///< spawns; "sent" events; those of them merged
  double busy_s = 0, good_s = 0, lost_s = 0;             ///< busy = good (merged) + lost (not merged)
  double wait_deducted_s = 0;                            ///< wait_us growth deducted from the sent windows
  double up_s = 0, waiting_s = 0, down_s = 0, paused_s = 0, restarting_s = 0;  ///< lane states; sum = window
  std::vector<lane_span> spans;                          ///< the lane, seconds since the run began
};

/// All times in seconds since the run began.
struct downtime_gap { double begin_s, end_s, alive_s; };  ///< a gap over the bound; alive_s of it is downtime
struct syncer_restart { double kill_s, recovered_s; bool recovered; };  ///< recovered: merged after the respawn
struct revision_violation {
  std::int64_t learner, incarnation;
  std::uint32_t fragment;
  std::int64_t from, to;  ///< highest revision seen before, the lower one seen at t_s
  double t_s;
};
struct fragment_report {
  std::uint32_t fragment;
  std::uint64_t merges;
  std::int64_t final_revision;
  double staleness_mean, staleness_max;
};

struct accounting {
  std::uint64_t sent = 0, accepted = 0, merged = 0, rejected = 0, lost_in_syncer_restart = 0, unanswered = 0,
                unaccounted = 0;
  std::map<std::string, std::uint64_t> rejected_by_reason;
  std::vector<std::string> unaccounted_keys;  ///< the first 10, each with why
};

/// What analyze() finds; times in seconds (since the run began where a point in time).
struct report {
  std::string mode;
  std::int64_t seed = 0, begin_us = 0;             ///< begin_us: the run's start, wall microseconds
  std::uint32_t learners = 0;                      ///< M
  double window_s = 0, allocated_s = 0;            ///< run window; M x window
  double goodput = 0, busy_s = 0, good_s = 0, lost_s = 0;
  std::vector<learner_report> per_learner;         ///< by learner id
  std::vector<lane_span> syncer_spans;
  std::vector<double> syncer_kills_s;
  double downtime_bound_s = 0, global_downtime_s = 0, longest_gap_s = 0, median_gap_s = 0, syncer_restart_s = 0;
  std::uint64_t advances = 0;                      ///< "merged" events inside the run window
  std::vector<downtime_gap> gaps;
  std::vector<syncer_restart> syncer_restarts;
  accounting counts;
  std::uint32_t fragments = 0;
  std::vector<revision_point> revisions;  ///< from "merged", a restored syncer's "start", the first "joined"
  std::vector<fragment_report> per_fragment;
  double staleness_mean = 0, staleness_max = 0;
  std::vector<revision_violation> violations;
  std::size_t malformed_lines = 0;
  bool ok = true;
  std::vector<std::string> failures, warnings;
};

namespace detail {

using interval = std::pair<std::int64_t, std::int64_t>;  // [first, second), microseconds

/// Sorted, disjoint, non-empty.
inline std::vector<interval> unite(std::vector<interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<interval> out;
  for (const interval& x : v)
    if (x.second <= x.first) continue;
    else if (!out.empty() && x.first <= out.back().second) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  return out;
}

/// Length of [a, b) covered by sorted disjoint intervals.
inline std::int64_t covered(const std::vector<interval>& v, std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  for (const interval& x : v) sum += std::max<std::int64_t>(0, std::min(b, x.second) - std::max(a, x.first));
  return sum;
}

/// The pieces of [a, b) outside sorted disjoint intervals.
inline std::vector<interval> outside(const std::vector<interval>& v, std::int64_t a, std::int64_t b) {
  std::vector<interval> out;
  for (const interval& x : v) {
    if (x.second <= a || x.first >= b) continue;
    if (x.first > a) out.push_back({a, x.first});
    a = std::max(a, x.second);
  }
  if (a < b) out.push_back({a, b});
  return out;
}

struct seg { std::int64_t begin, end; lane_state state; };

/// One supervised process slot (a learner id or the syncer) as the runner's events describe it.
struct process_track {
  bool present = false, paused = false, joined = false;
  std::int64_t incarnation = -1, pid = -1, since = 0;
  std::vector<seg> segs;  // clipped to the run window

  lane_state state() const {
    return !present ? lane_state::down : paused ? lane_state::paused : joined ? lane_state::up : lane_state::restarting;
  }
  /// Applies `change` at time t; a state change closes the current segment (clipped to [lo, hi]).
  template <class Change> void at(std::int64_t t, std::int64_t lo, std::int64_t hi, Change change) {
    const lane_state before = state();
    change(*this);
    if (state() != before) close(t, lo, hi, before);
  }
  void close(std::int64_t t, std::int64_t lo, std::int64_t hi, lane_state s) {
    if (std::min(t, hi) > std::max(since, lo)) segs.push_back({std::max(since, lo), std::min(t, hi), s});
    since = std::max(since, t);
  }
  std::vector<interval> in(std::initializer_list<lane_state> states) const {
    std::vector<interval> out;
    for (const seg& s : segs)
      if (std::find(states.begin(), states.end(), s.state) != states.end()) out.push_back({s.begin, s.end});
    return unite(out);
  }
};

}  // namespace detail

/// Analyzes a trace. Definitions:
/// - Run window: runner "begin" (else the first event) to runner "stopping" (else "end", else the last event).
///   Allocated learner time = M x window, M from "begin" (else the number of learner ids seen).
/// - Lane states from runner events: down (no process: before "spawn", after "kill"/"exit" of its pid), paused
///   (between "pause" and "resume"), restarting (spawned, its incarnation has not logged "joined"), waiting (in a
///   learner "wait" span while otherwise up), up. A learner is alive when spawned, not gone and not paused.
/// - Goodput (DESIGN 2.8: the share of allocated learner time spent on inner steps whose work reached the global
///   model): the window of a "sent" is (the previous "sent" of its incarnation, or its "joined"; this "sent"], cut
///   to the run window; busy = its length - the wait_us growth over it (pro rata when cut) - the time the runner
///   had the learner paused in it. Busy is good iff (L, I, sequence) is in some syncer "merged" (at any time), else
///   lost. goodput = sum of good / allocated time.
/// - Global downtime (DESIGN 2.8: wall time in which no fragment's revision advances although a learner is alive):
///   advances are the syncer "merged" events in the window; gaps run between consecutive advances and from the
///   last one to the window's end (start-up before the first advance is skipped). Syncer restart windows (a syncer
///   "kill" until the first "merged" after the next syncer "spawn", else the window's end) are cut out and summed
///   as syncer_restart_s. A remaining piece longer than the bound counts as downtime for the time in it during
///   which at least one learner was alive; a piece up to the bound is normal cadence.
/// - Accounting (DESIGN 2.7, no silent loss): a syncer "accepted" is merged (its key in a later "merged"), else
///   lost_in_syncer_restart (a syncer "kill" follows it), else unaccounted. A learner "verdict" accepted=true
///   without a syncer "accepted" of its key is unaccounted. A "sent" with neither "accepted" nor "rejected" is
///   unanswered: the message may have died with a killed process, so it is a warning, not a failure.
/// - Revisions: per learner id (all incarnations) and fragment, a revision seen in "joined" or "adopted" below the
///   highest seen before is a violation.
/// Failures (ok = false): downtime > 0, no advance at all while a learner was alive, unaccounted > 0, violations.
/// Malformed lines are a warning: they cost the report data, and every other check still runs on the rest.
inline report analyze(const trace& tr, const report_options& options) {
  using namespace detail;
  using pair = std::pair<std::int64_t, std::int64_t>;
  report r;
  r.downtime_bound_s = options.downtime_bound_s;
  r.malformed_lines = tr.malformed_lines;
  if (r.malformed_lines > 0) r.warnings.push_back(std::to_string(r.malformed_lines) + " malformed line(s) skipped");
  const std::vector<event>& evs = tr.events;
  if (evs.empty()) return r.ok = false, r.failures.push_back("the trace holds no events"), r;
  const auto is = [](const event& e, std::string_view src, std::string_view ev) { return e.src == src && e.ev == ev; };
  const auto runner = [&](std::string_view ev) -> const event* {
    const auto it = std::find_if(evs.begin(), evs.end(), [&](const event& e) { return is(e, "runner", ev); });
    return it == evs.end() ? nullptr : &*it;
  };
  const event* begin = runner("begin");
  const event* stop = runner("stopping") ? runner("stopping") : runner("end");
  const std::int64_t lo = begin ? begin->t : evs.front().t, hi = std::max(lo, stop ? stop->t : evs.back().t);
  if (!begin) r.warnings.push_back("no runner \"begin\": the run window starts at the first event");
  if (!stop) r.warnings.push_back("no runner \"stopping\" or \"end\": the run window ends at the last event");
  const auto sec = [lo](std::int64_t us) { return static_cast<double>(us - lo) * 1e-6; };
  const auto secs = [](std::int64_t us) { return static_cast<double>(us) * 1e-6; };
  r.begin_us = lo, r.window_s = secs(hi - lo);
  if (begin) r.mode = begin->text("mode"), r.seed = begin->integer("seed").value_or(0);

  // Pass 1: process lanes, waits, merged keys, answers, syncer kills, fragment count.
  std::map<std::int64_t, process_track> tracks;
  std::map<std::int64_t, std::vector<interval>> waits;
  std::map<contribution_key, std::size_t> last_merge;  // key -> index of the last "merged" holding it
  std::map<pair, std::int64_t> spawned_at;             // (learner, incarnation) -> t
  std::set<contribution_key> accepted_keys, answered_keys;
  std::vector<std::size_t> syncer_kills, merged_at;
  process_track syncer;
  syncer.since = lo;
  std::size_t fragments = 0;
  constexpr std::size_t max_fragments = 1 << 16;  // a garbage fragment index must not size the tables
  const auto track = [&](std::int64_t learner) -> process_track& {
    auto [it, fresh] = tracks.try_emplace(learner);
    if (fresh) it->second.since = lo;
    return it->second;
  };
  const std::int64_t declared = begin ? std::clamp<std::int64_t>(begin->integer("learners").value_or(0), 0, 1 << 16) : 0;
  for (std::int64_t l = 0; l < declared; ++l) track(l);
  for (std::size_t k = 0; k < evs.size(); ++k) {
    const event& e = evs[k];
    const std::int64_t learner = e.integer("learner").value_or(-1), inc = e.integer("incarnation").value_or(-1);
    const contribution_key key{learner, inc, e.integer("sequence").value_or(-1)};
    if (const auto f = e.integer("fragment"); f && *f >= 0)
      fragments = std::max(fragments, std::min(static_cast<std::size_t>(*f), max_fragments - 1) + 1);
    if (e.ev == "joined" || is(e, "syncer", "start"))
      fragments = std::max(fragments, std::min(e.integers("revisions").size(), max_fragments));
    const bool to_syncer = e.text("target") == "syncer";
    if (e.src == "runner" && (to_syncer || (e.text("target") == "learner" && learner >= 0))) {
      process_track& p = to_syncer ? syncer : track(learner);
      const std::int64_t pid = e.integer("pid").value_or(-1);
      const bool same = pid < 0 || pid == p.pid;
      if (e.ev == "spawn") {
        p.at(e.t, lo, hi, [&](process_track& q) { q = {true, false, to_syncer, inc, pid, q.since, q.segs}; });
        if (!to_syncer) spawned_at[{learner, inc}] = e.t;
      }
      if ((e.ev == "kill" || e.ev == "exit") && same) p.at(e.t, lo, hi, [](process_track& q) { q.present = false; });
      if ((e.ev == "pause" || e.ev == "resume") && same)
        p.at(e.t, lo, hi, [&](process_track& q) { q.paused = e.ev == "pause"; });
      if (to_syncer && e.ev == "kill") syncer_kills.push_back(k);
    } else if (e.src == "learner" && learner >= 0) {
      process_track& p = track(learner);
      if (e.ev == "joined" && p.present && inc == p.incarnation)
        p.at(e.t, lo, hi, [](process_track& q) { q.joined = true; });
      if (e.ev == "wait") waits[learner].push_back({e.integer("begin").value_or(0), e.integer("end").value_or(0)});
    } else if (e.src == "syncer") {
      if (e.ev == "merged") merged_at.push_back(k);
      for (const auto& c : e.rows("contributions"))
        if (c.size() == 3 && e.ev == "merged") last_merge[{c[0], c[1], c[2]}] = k;
      if (e.ev == "accepted") accepted_keys.insert(key);
      if (e.ev == "accepted" || e.ev == "rejected") answered_keys.insert(key);
    }
  }
  r.learners = static_cast<std::uint32_t>(begin && begin->integer("learners") ? declared : std::ssize(tracks));
  r.allocated_s = r.learners * r.window_s;
  r.fragments = static_cast<std::uint32_t>(fragments);
  const auto to_spans = [&](const std::vector<seg>& segs) {
    std::vector<lane_span> out;
    for (const seg& s : segs)
      if (!out.empty() && out.back().state == s.state && out.back().end_s == sec(s.begin))
        out.back().end_s = sec(s.end);
      else out.push_back({sec(s.begin), sec(s.end), s.state});
    return out;
  };
  syncer.close(hi, lo, hi, syncer.state());
  r.syncer_spans = to_spans(syncer.segs);

  // Learner lanes (waits laid over "up"), state times, alive time, pauses.
  std::vector<interval> alive;
  std::map<std::int64_t, std::vector<interval>> paused;
  std::map<std::int64_t, learner_report*> by_id;
  r.per_learner.reserve(tracks.size());
  for (auto& [id, p] : tracks) {
    p.close(hi, lo, hi, p.state());
    for (const interval& a : p.in({lane_state::up, lane_state::restarting})) alive.push_back(a);
    paused[id] = p.in({lane_state::paused});
    learner_report& lr = *(by_id[id] = &r.per_learner.emplace_back());
    lr.learner = id;
    std::vector<seg> segs;
    for (const seg& s : p.segs) {
      std::int64_t cur = s.begin;
      for (const interval& x : s.state == lane_state::up ? unite(waits[id]) : std::vector<interval>{})
        if (x.second > cur && x.first < s.end) {
          if (x.first > cur) segs.push_back({cur, x.first, lane_state::up});
          segs.push_back({std::max(x.first, cur), std::min(x.second, s.end), lane_state::waiting});
          cur = std::min(x.second, s.end);
        }
      if (cur < s.end) segs.push_back({cur, s.end, s.state});
    }
    for (const seg& s : segs)
      (s.state == lane_state::up ? lr.up_s : s.state == lane_state::waiting ? lr.waiting_s
       : s.state == lane_state::down ? lr.down_s : s.state == lane_state::paused ? lr.paused_s : lr.restarting_s)
          += secs(s.end - s.begin);
    lr.spans = to_spans(segs);
  }
  alive = unite(alive);
  for (const auto& spawn : spawned_at) ++by_id[spawn.first.first]->incarnations;

  // Pass 2: goodput, accounting, revisions, staleness.
  struct cursor { std::int64_t t, wait_us; };
  std::map<pair, cursor> cursors;                            // (learner, incarnation) -> previous sent or joined
  std::map<std::pair<std::int64_t, std::size_t>, std::int64_t> seen;  // (learner, fragment) -> highest revision
  std::vector<double> stale_sum(fragments), stale_max(fragments), stale_n(fragments);
  std::vector<std::uint64_t> merges(fragments);
  std::vector<std::int64_t> final_revision(fragments);
  std::vector<bool> plotted(fragments);
  const auto point = [&](std::int64_t t, std::size_t f, std::int64_t revision) {
    r.revisions.push_back({sec(std::clamp(t, lo, hi)), static_cast<std::uint32_t>(f),
                           static_cast<std::uint64_t>(std::max<std::int64_t>(0, revision))});
    plotted[f] = true;
  };
  accounting& a = r.counts;
  const auto unaccounted = [&a](const contribution_key& key, const char* why) {
    if (++a.unaccounted <= 10)
      a.unaccounted_keys.push_back("learner " + std::to_string(std::get<0>(key)) + " incarnation " +
                                   std::to_string(std::get<1>(key)) + " sequence " + std::to_string(std::get<2>(key)) +
                                   ": " + why);
  };
  const auto see = [&](const event& e, std::int64_t learner, std::int64_t fragment, std::int64_t revision) {
    if (fragment < 0) return;
    const auto [it, fresh] = seen.try_emplace({learner, static_cast<std::size_t>(fragment)}, revision);
    if (!fresh && revision < it->second)
      r.violations.push_back({learner, e.integer("incarnation").value_or(-1), static_cast<std::uint32_t>(fragment),
                              it->second, revision, sec(e.t)});
    it->second = std::max(it->second, revision);
  };
  for (std::size_t k = 0; k < evs.size(); ++k) {
    const event& e = evs[k];
    const std::int64_t learner = e.integer("learner").value_or(-1), inc = e.integer("incarnation").value_or(-1);
    const contribution_key key{learner, inc, e.integer("sequence").value_or(-1)};
    const std::int64_t fragment = e.integer("fragment").value_or(-1);
    const std::vector<std::int64_t>& revs = e.integers("revisions");
    if (e.src == "learner" && learner >= 0 && e.ev == "joined") {
      cursors[{learner, inc}] = {e.t, e.integer("wait_us").value_or(0)};
      for (std::size_t f = 0; f < revs.size(); ++f) {
        see(e, learner, static_cast<std::int64_t>(f), revs[f]);
        if (f < fragments && !plotted[f]) point(e.t, f, revs[f]);
      }
    } else if (e.src == "learner" && learner >= 0 && e.ev == "adopted") {
      see(e, learner, fragment, e.integer("revision").value_or(0));
    } else if (e.src == "learner" && e.ev == "verdict" && e.flag("accepted") && !accepted_keys.count(key)) {
      unaccounted(key, "acknowledged as accepted, but the syncer never logged \"accepted\"");
    } else if (e.src == "learner" && learner >= 0 && e.ev == "sent") {
      learner_report& lr = *by_id[learner];
      ++a.sent, ++lr.sent;
      a.unanswered += !answered_keys.count(key);
      const bool good = last_merge.count(key) > 0;
      lr.merged += good;
      const auto spawn = spawned_at.find({learner, inc});
      const auto c = cursors.find({learner, inc});
      const cursor prev = c != cursors.end() ? c->second : cursor{spawn != spawned_at.end() ? spawn->second : e.t, 0};
      const std::int64_t wait_us = e.integer("wait_us").value_or(prev.wait_us);
      cursors[{learner, inc}] = {e.t, wait_us};
      const std::int64_t b = std::max(prev.t, lo), end = std::min(e.t, hi);
      if (end <= b) continue;
      const double wait = secs(std::max<std::int64_t>(0, wait_us - prev.wait_us)) * static_cast<double>(end - b) /
                          static_cast<double>(e.t - prev.t);
      const double busy = std::max(0.0, secs(end - b - covered(paused[learner], b, end)) - wait);
      lr.wait_deducted_s += wait, lr.busy_s += busy;
      (good ? lr.good_s : lr.lost_s) += busy;
    } else if (is(e, "syncer", "accepted")) {
      ++a.accepted;
      const auto merged = last_merge.find(key);
      if (merged != last_merge.end() && merged->second > k) ++a.merged;
      else if (!syncer_kills.empty() && syncer_kills.back() > k) ++a.lost_in_syncer_restart;
      else unaccounted(key, "accepted by the syncer, never merged, no syncer kill after it");
    } else if (is(e, "syncer", "rejected")) {
      ++a.rejected, ++a.rejected_by_reason[e.get<std::string>("reason") ? std::string(e.text("reason")) : "unknown"];
    } else if (is(e, "syncer", "start")) {
      for (std::size_t f = 0; f < std::min(revs.size(), fragments); ++f) point(e.t, f, revs[f]);
    } else if (is(e, "syncer", "merged") && fragment >= 0 && static_cast<std::size_t>(fragment) < fragments) {
      const auto f = static_cast<std::size_t>(fragment);
      ++merges[f], final_revision[f] = e.integer("revision").value_or(0);
      point(e.t, f, final_revision[f]);
      for (const std::int64_t x : e.integers("staleness")) {
        const double s = static_cast<double>(x);
        stale_sum[f] += s, ++stale_n[f], stale_max[f] = std::max(stale_max[f], s);
      }
    }
  }
  double stale_all = 0, stale_count = 0;
  for (std::size_t f = 0; f < fragments; ++f) {
    r.per_fragment.push_back({static_cast<std::uint32_t>(f), merges[f], final_revision[f],
                              stale_n[f] > 0 ? stale_sum[f] / stale_n[f] : 0, stale_max[f]});
    stale_all += stale_sum[f], stale_count += stale_n[f], r.staleness_max = std::max(r.staleness_max, stale_max[f]);
  }
  r.staleness_mean = stale_count > 0 ? stale_all / stale_count : 0;
  for (const learner_report& lr : r.per_learner) r.busy_s += lr.busy_s, r.good_s += lr.good_s, r.lost_s += lr.lost_s;
  r.goodput = r.allocated_s > 0 ? r.good_s / r.allocated_s : 0;

  // Global downtime.
  std::vector<std::int64_t> advances, between;
  for (const std::size_t k : merged_at)
    if (evs[k].t >= lo && evs[k].t <= hi) advances.push_back(evs[k].t);
  r.advances = advances.size();
  std::vector<interval> restarts;
  for (const std::size_t kill : syncer_kills) {
    if (evs[kill].t >= hi) continue;
    std::size_t k = kill + 1;
    while (k < evs.size() && !(is(evs[k], "runner", "spawn") && evs[k].text("target") == "syncer")) ++k;
    const auto next = std::upper_bound(merged_at.begin(), merged_at.end(), k);
    const bool recovered = k < evs.size() && next != merged_at.end() && evs[*next].t <= hi;
    const std::int64_t until = recovered ? evs[*next].t : hi;
    r.syncer_kills_s.push_back(sec(evs[kill].t));
    r.syncer_restarts.push_back({sec(evs[kill].t), sec(until), recovered});
    restarts.push_back({std::max(evs[kill].t, lo), until});
  }
  restarts = unite(restarts);
  r.syncer_restart_s = secs(covered(restarts, lo, hi));
  for (std::size_t i = 0; i < advances.size(); ++i) {
    const std::int64_t gap_end = i + 1 < advances.size() ? advances[i + 1] : hi;
    if (i + 1 < advances.size()) between.push_back(gap_end - advances[i]);
    for (const auto& [b, end] : outside(restarts, advances[i], gap_end)) {
      r.longest_gap_s = std::max(r.longest_gap_s, secs(end - b));
      if (secs(end - b) <= options.downtime_bound_s) continue;
      r.gaps.push_back({sec(b), sec(end), secs(covered(alive, b, end))});
      r.global_downtime_s += r.gaps.back().alive_s;
    }
  }
  std::sort(between.begin(), between.end());
  if (!between.empty()) r.median_gap_s = secs(between[(between.size() - 1) / 2] + between[between.size() / 2]) / 2;

  // Invariants.
  if (r.global_downtime_s > 0)
    r.failures.push_back("global downtime " + std::to_string(r.global_downtime_s) +
                         " s: no revision advanced for longer than the bound while a learner was alive");
  if (advances.empty() && covered(alive, lo, hi) > 0)
    r.failures.push_back("no fragment revision advanced in the run window although a learner was alive");
  if (a.unaccounted > 0) r.failures.push_back(std::to_string(a.unaccounted) + " unaccounted contribution(s)");
  if (!r.violations.empty())
    r.failures.push_back(std::to_string(r.violations.size()) + " revision(s) seen going backwards by a learner");
  if (a.unanswered > 0)
    r.warnings.push_back(std::to_string(a.unanswered) + " sent contribution(s) never answered by the syncer");
  r.ok = r.failures.empty();
  return r;
}

namespace detail {

/// Appends indented JSON: key() starts an object member; the other calls write a value or open/close one.
struct json_writer {
  std::string out;
  int depth = 0;
  bool first = true, after_key = false;

  void item() {
    if (after_key) return void(after_key = false);
    if (!first) out += ',';
    if (depth > 0) out += '\n', out.append(2 * static_cast<std::size_t>(depth), ' ');
    first = false;
  }
  void key(std::string_view k) { write(k), out += ": ", after_key = true; }
  void open(char c) { item(), out += c, ++depth, first = true; }
  void close(char c) {
    if (--depth, !first) out += '\n', out.append(2 * static_cast<std::size_t>(depth), ' ');
    out += c, first = false;
  }
  template <class T> void write(const T& x) {
    item();
    char b[32];
    if constexpr (std::is_same_v<T, bool>) out += x ? "true" : "false";
    else if constexpr (std::is_integral_v<T>) out += std::to_string(x);
    else if constexpr (std::is_floating_point_v<T>)
      out += std::isfinite(x) ? (std::snprintf(b, 32, "%.9g", x), b) : "null";
    else {
      out += '"';
      for (const char c : std::string_view(x))
        if (c == '"' || c == '\\') out += '\\', out += c;
        else if (static_cast<unsigned char>(c) < 0x20) std::snprintf(b, 32, "\\u%04x", unsigned(c)), out += b;
        else out += c;
      out += '"';
    }
  }
  template <class T> json_writer& operator()(std::string_view k, const T& x) { return key(k), write(x), *this; }
};

}  // namespace detail

/// The report as one JSON object with stable keys (seconds; points in time since the run began; begin_us wall).
inline std::string to_json(const report& r) {
  detail::json_writer w;
  const auto strings = [&w](std::string_view k, const std::vector<std::string>& v) {
    w.key(k), w.open('[');
    for (const std::string& s : v) w.write(s);
    w.close(']');
  };
  w.open('{');
  w("mode", r.mode)("seed", r.seed)("begin_us", r.begin_us)("learners", r.learners)("window_s", r.window_s);
  w("allocated_learner_s", r.allocated_s)("goodput", r.goodput)("busy_s", r.busy_s)("good_s", r.good_s);
  w("lost_s", r.lost_s).key("per_learner"), w.open('[');
  for (const learner_report& l : r.per_learner) {
    w.open('{'), w("learner", l.learner)("incarnations", l.incarnations)("sent", l.sent)("merged", l.merged);
    w("busy_s", l.busy_s)("good_s", l.good_s)("lost_s", l.lost_s)("wait_deducted_s", l.wait_deducted_s);
    w("up_s", l.up_s)("waiting_s", l.waiting_s)("down_s", l.down_s)("paused_s", l.paused_s);
    w("restarting_s", l.restarting_s).close('}');
  }
  w.close(']'), w.key("downtime"), w.open('{');
  w("bound_s", r.downtime_bound_s)("global_downtime_s", r.global_downtime_s)("longest_gap_s", r.longest_gap_s);
  w("median_gap_s", r.median_gap_s)("advances", r.advances).key("gaps"), w.open('[');
  for (const downtime_gap& g : r.gaps)
    w.open('{'), w("begin_s", g.begin_s)("end_s", g.end_s)("alive_s", g.alive_s).close('}');
  w.close(']'), w("syncer_restart_s", r.syncer_restart_s).key("syncer_restarts"), w.open('[');
  for (const syncer_restart& s : r.syncer_restarts)
    w.open('{'), w("kill_s", s.kill_s)("recovered_s", s.recovered_s)("recovered", s.recovered).close('}');
  w.close(']'), w.close('}');
  const accounting& a = r.counts;
  w.key("accounting"), w.open('{');
  w("sent", a.sent)("accepted", a.accepted)("merged", a.merged)("rejected", a.rejected);
  w("lost_in_syncer_restart", a.lost_in_syncer_restart)("unanswered", a.unanswered)("unaccounted", a.unaccounted);
  w.key("rejected_by_reason"), w.open('{');
  for (const auto& [reason, n] : a.rejected_by_reason) w(reason, n);
  w.close('}'), strings("unaccounted_keys", a.unaccounted_keys), w.close('}');
  w.key("revisions"), w.open('{');
  w("fragments", r.fragments)("staleness_mean", r.staleness_mean)("staleness_max", r.staleness_max);
  w.key("per_fragment"), w.open('[');
  for (const fragment_report& f : r.per_fragment)
    w.open('{'), w("fragment", f.fragment)("merges", f.merges)("final_revision", f.final_revision),
        w("staleness_mean", f.staleness_mean)("staleness_max", f.staleness_max).close('}');
  w.close(']'), w.key("violations"), w.open('[');
  for (const revision_violation& v : r.violations)
    w.open('{'), w("learner", v.learner)("incarnation", v.incarnation)("fragment", v.fragment)("from", v.from),
        w("to", v.to)("t_s", v.t_s).close('}');
  w.close(']'), w.close('}');
  w("malformed_lines", r.malformed_lines).key("invariants"), w.open('{'), w("ok", r.ok);
  strings("failures", r.failures), strings("warnings", r.warnings);
  w.close('}'), w.close('}');
  return w.out + '\n';
}

/// The renderer's input: a lane per learner ("learner L"), then "syncer"; revision points; a mark per syncer kill.
inline timeline to_timeline(const report& r, std::string title) {
  timeline t{std::move(title), r.window_s > 0 ? r.window_s : 1e-3, {}, r.revisions, r.fragments, r.syncer_kills_s};
  for (const learner_report& l : r.per_learner) t.lanes.push_back({"learner " + std::to_string(l.learner), l.spans});
  t.lanes.push_back({"syncer", r.syncer_spans});
  return t;
}

}  // namespace diloco_chaos
