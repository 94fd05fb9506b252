// A shared event log for accounting runs: every process of a run (learners,
// the syncer, a chaos runner) appends its events to one file as JSON lines,
// one `write` per line on a descriptor opened with O_APPEND, so lines of
// different processes never interleave and a process killed with SIGKILL
// leaves only whole lines behind. Every line is built by `json_fields`, which
// escapes strings as RFC 8259 requires. The format is specified in
// docs/chaos.md. POSIX only.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "diloco/metrics/events.hpp"

namespace diloco {

/// The members of one JSON object, `,"key":value` each, in the order added:
/// what `trace_writer` appends to a line after its time, source and event.
/// Strings (keys included) are escaped as RFC 8259 requires: `"` and `\` by a
/// backslash, control characters below 0x20 as `\b \f \n \r \t` or `\u00XX`;
/// bytes that are not well-formed UTF-8 become U+FFFD (one per maximal
/// subpart), so the line stays valid JSON whatever the string held. Numbers: integers exactly,
/// doubles in the shortest form that reads back to the same value, NaN and
/// infinities as `null` (JSON has no such numbers). Ranges of numbers,
/// strings or ranges become arrays. Costs one string append per member.
class json_fields {
 public:
  /// `,"key":value` for a string, a bool, a number or a range of them.
  template <class Value>
  json_fields& add(std::string_view key, const Value& value) {
    append_key(key);
    append_value(text_, value);
    return *this;
  }

  /// `,"key":json` with `json` one JSON value serialized elsewhere (by a
  /// JSON library); it is copied as it is, unchecked.
  json_fields& add_serialized(std::string_view key, std::string_view json) {
    append_key(key);
    text_.append(json);
    return *this;
  }

  /// `other`'s members after this one's.
  json_fields& append(const json_fields& other) {
    text_.append(other.text_);
    return *this;
  }

  /// Empty, or `,"key":value,...`.
  const std::string& text() const noexcept { return text_; }
  bool empty() const noexcept { return text_.empty(); }

  /// `s` as a JSON string, quotes included, appended to `out`.
  static void append_string(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    out.push_back('"');
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x80) {
        switch (c) {
          case '"': out.append("\\\""); break;
          case '\\': out.append("\\\\"); break;
          case '\b': out.append("\\b"); break;
          case '\f': out.append("\\f"); break;
          case '\n': out.append("\\n"); break;
          case '\r': out.append("\\r"); break;
          case '\t': out.append("\\t"); break;
          default:
            if (c < 0x20) {
              out.append("\\u00").push_back(hex[c >> 4]);
              out.push_back(hex[c & 0xf]);
            } else {
              out.push_back(static_cast<char>(c));
            }
        }
        ++i;
        continue;
      }
      const auto [n, well_formed] = utf8_sequence(s.substr(i));
      if (well_formed)
        out.append(s.substr(i, n));
      else
        out.append("\xef\xbf\xbd");  // U+FFFD
      i += n;
    }
    out.push_back('"');
  }

 private:
  void append_key(std::string_view key) {
    text_.push_back(',');
    append_string(text_, key);
    text_.push_back(':');
  }

  template <class Value>
  static void append_value(std::string& out, const Value& value) {
    if constexpr (std::is_same_v<Value, bool>) {
      out.append(value ? "true" : "false");
    } else if constexpr (std::is_integral_v<Value>) {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
      out.append(digits, end);
    } else if constexpr (std::is_floating_point_v<Value>) {
      if (!std::isfinite(value)) {
        out.append("null");
      } else {
        char digits[32];
        const auto end = std::to_chars(digits, digits + sizeof digits, static_cast<double>(value)).ptr;
        out.append(digits, end);
      }
    } else if constexpr (std::is_convertible_v<const Value&, std::string_view>) {
      append_string(out, std::string_view(value));
    } else if constexpr (std::ranges::input_range<const Value>) {
      out.push_back('[');
      bool first = true;
      for (const auto& element : value) {
        if (!first) out.push_back(',');
        first = false;
        append_value(out, element);
      }
      out.push_back(']');
    } else {
      static_assert(std::ranges::input_range<const Value>,
                    "json_fields::add takes a string, a bool, an integer, a floating-point number or a range of them");
    }
  }

  /// The UTF-8 sequence `s` starts with (2 to 4 bytes; no overlong forms,
  /// no surrogates, nothing above U+10FFFF): its length and true, or, for a
  /// malformed one, the length of its maximal subpart (at least 1 byte, the
  /// bytes one U+FFFD replaces, as the Unicode standard recommends) and false.
  struct utf8_run {
    std::size_t length;
    bool well_formed;
  };
  static utf8_run utf8_sequence(std::string_view s) noexcept {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const auto c = byte(0);
    std::size_t n = 0;
    unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
    if (c >= 0xc2 && c <= 0xdf)
      n = 2;
    else if (c == 0xe0)
      n = 3, low = 0xa0;
    else if (c == 0xed)
      n = 3, high = 0x9f;
    else if (c >= 0xe1 && c <= 0xef)
      n = 3;
    else if (c == 0xf0)
      n = 4, low = 0x90;
    else if (c >= 0xf1 && c <= 0xf3)
      n = 4;
    else if (c == 0xf4)
      n = 4, high = 0x8f;
    else
      return {1, false};
    for (std::size_t i = 1; i < n; ++i) {
      const bool fits =
          i < s.size() && (i == 1 ? byte(i) >= low && byte(i) <= high : byte(i) >= 0x80 && byte(i) <= 0xbf);
      if (!fits) return {i, false};
    }
    return {n, true};
  }

  std::string text_;
};

/// Appends events to a trace file, stamped with the wall clock (µs since the
/// Unix epoch, the same clock in every process of a machine). Move-only.
/// Each call costs one `write` system call; not thread-safe.
class trace_writer {
 public:
  /// Opens (creates) `path` for appending; throws `std::system_error`.
  explicit trace_writer(const std::filesystem::path& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "diloco: cannot open trace " + path.string());
  }
  trace_writer(trace_writer&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), unit_rank_(other.unit_rank_), unit_ranks_(other.unit_ranks_) {}
  trace_writer& operator=(trace_writer&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
      unit_rank_ = other.unit_rank_, unit_ranks_ = other.unit_ranks_;
    }
    return *this;
  }
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;
  ~trace_writer() { close(); }

  /// Microseconds since the Unix epoch now.
  static std::int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  /// Writes `{"t":NOW,"src":"SRC","ev":"EV"` + `fields` + `}` as one line.
  /// Errors are ignored: a trace must never stop training.
  void write(std::string_view src, std::string_view ev, const json_fields& fields = {}) {
    std::string line;
    line.reserve(64 + fields.text().size());
    line.append("{\"t\":").append(std::to_string(now_us())).append(",\"src\":");
    json_fields::append_string(line, src);
    line.append(",\"ev\":");
    json_fields::append_string(line, ev);
    line.append(fields.text()).append("}\n");
    for (std::size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }

  /// A line from learner `id`'s `incarnation`: `write` with those two fields
  /// first (for what a learner process records besides `learner_event`s).
  void learner_line(std::uint32_t id, std::uint32_t incarnation, std::string_view ev, const json_fields& fields = {}) {
    json_fields f;
    f.add("learner", id).add("incarnation", incarnation);
    if (unit_ranks_ > 1) f.add("rank", unit_rank_).add("ranks", unit_ranks_);
    write("learner", ev, f.append(fields));
  }

  /// Makes every learner line written from now on say that rank `rank` of a
  /// learner unit of `ranks` ranks wrote it (`"rank"` and `"ranks"` after
  /// `learner` and `incarnation`; nothing when `ranks` is 1): each rank of a
  /// unit traces the contributions it sends itself (docs/chaos.md).
  void unit_rank(std::uint32_t rank, std::uint32_t ranks) noexcept { unit_rank_ = rank, unit_ranks_ = ranks; }

  /// A learner's event; `id` and `incarnation` say whose.
  void learner(std::uint32_t id, std::uint32_t incarnation, const learner_event& e) {
    json_fields f;
    switch (e.what) {
      case learner_event::kind::joined:
        f.add("revisions", e.revisions);
        return learner_line(id, incarnation, "joined", counters(f, e));
      case learner_event::kind::sent:
        f.add("fragment", e.fragment).add("sequence", e.sequence).add("base", e.revision).add("work", e.work);
        return learner_line(id, incarnation, "sent", counters(f, e));
      case learner_event::kind::verdict:
        f.add("fragment", e.fragment).add("sequence", e.sequence).add("accepted", e.accepted);
        if (!e.accepted) f.add("reason", to_string(e.reason));
        return learner_line(id, incarnation, "verdict", f);
      case learner_event::kind::adopted:
        f.add("fragment", e.fragment).add("revision", e.revision).add("overwritten", e.work);
        if (e.epoch != 0) f.add("epoch", e.epoch);
        f.add("crc", e.payload_crc);
        return learner_line(id, incarnation, "adopted", counters(f, e));
      case learner_event::kind::waited: {
        const std::int64_t end = now_us();
        f.add("begin", end - std::chrono::duration_cast<std::chrono::microseconds>(e.wait).count()).add("end", end);
        return learner_line(id, incarnation, "wait", f);
      }
    }
  }

  /// The syncer's verdict on a contribution.
  void contribution(const contribution_event& e) {
    json_fields f;
    f.add("learner", e.learner).add("incarnation", e.incarnation).add("sequence", e.sequence);
    f.add("fragment", e.fragment).add("base", e.base_revision);
    if (!e.accepted) f.add("reason", to_string(e.reason));
    write("syncer", e.accepted ? "accepted" : "rejected", f);
  }

  /// An outer update: fragment, new revision, and who was merged (filled
  /// when the syncer has an `on_contribution` hook); the epoch of the
  /// syncer's leadership when it has one (docs/protocol.md, "Epochs").
  void merged(std::uint32_t fragment, std::uint64_t revision, std::span<const merged_contribution> merged,
              std::uint64_t epoch = 0) {
    std::vector<std::array<std::uint64_t, 3>> who;
    std::vector<std::uint64_t> staleness;
    for (const auto& c : merged) {
      who.push_back({c.learner, c.incarnation, c.sequence});
      staleness.push_back(c.staleness);
    }
    json_fields f;
    f.add("fragment", fragment).add("revision", revision).add("contributions", who).add("staleness", staleness);
    if (epoch != 0) f.add("epoch", epoch);
    write("syncer", "merged", f);
  }

  /// A round the syncer dropped instead of publishing: fragment, its
  /// unchanged revision, why, and who was in it.
  void dropped(const drop_event& d) {
    std::vector<std::array<std::uint64_t, 3>> who;
    for (const auto& [c, norm] : d.contributions) who.push_back({c.learner, c.incarnation, c.sequence});
    json_fields f;
    f.add("fragment", d.fragment)
        .add("revision", d.revision)
        .add("reason", to_string(d.reason))
        .add("contributions", who);
    write("syncer", "dropped", f);
  }

 private:
  /// `f` with the learner's running counters after its members.
  static json_fields& counters(json_fields& f, const learner_event& e) {
    return f.add("steps", e.steps)
        .add("wait_us", std::chrono::duration_cast<std::chrono::microseconds>(e.waited_total).count());
  }

  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  std::uint32_t unit_rank_ = 0, unit_ranks_ = 1;
};

}  // namespace diloco
