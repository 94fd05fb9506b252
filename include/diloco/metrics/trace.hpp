// A shared event log for accounting runs: every process of a run (learners,
// the syncer, a chaos runner) appends its events to one file as JSON lines,
// one `write` per line on a descriptor opened with O_APPEND, so lines of
// different processes never interleave and a process killed with SIGKILL
// leaves only whole lines behind. The format is specified in docs/chaos.md.
// POSIX only.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/metrics/events.hpp"

namespace diloco {

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
  trace_writer(trace_writer&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  trace_writer& operator=(trace_writer&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;
  ~trace_writer() { close(); }

  /// Microseconds since the Unix epoch now.
  static std::int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  /// Writes `{"t":NOW,"src":"SRC","ev":"EV"` + `fields` + `}` as one line;
  /// `fields` is empty or starts with a comma. Errors are ignored: a trace
  /// must never stop training.
  void write(std::string_view src, std::string_view ev, std::string_view fields = {}) {
    std::string line;
    line.reserve(64 + fields.size());
    line.append("{\"t\":").append(std::to_string(now_us())).append(",\"src\":\"").append(src);
    line.append("\",\"ev\":\"").append(ev).append("\"").append(fields).append("}\n");
    for (std::size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }

  /// A line from learner `id`'s `incarnation`: `write` with those two fields
  /// first (for what a learner process records besides `learner_event`s).
  void learner_line(std::uint32_t id, std::uint32_t incarnation, std::string_view ev, std::string_view fields = {}) {
    std::string f = ",\"learner\":";
    f.append(std::to_string(id)).append(",\"incarnation\":").append(std::to_string(incarnation)).append(fields);
    write("learner", ev, f);
  }

  /// A learner's event; `id` and `incarnation` say whose.
  void learner(std::uint32_t id, std::uint32_t incarnation, const learner_event& e) {
    std::ostringstream f;
    switch (e.what) {
      case learner_event::kind::joined:
        f << ",\"revisions\":" << array(e.revisions) << counters(e);
        return learner_line(id, incarnation, "joined", f.str());
      case learner_event::kind::sent:
        f << ",\"fragment\":" << e.fragment << ",\"sequence\":" << e.sequence << ",\"base\":" << e.revision
          << ",\"work\":" << e.work << counters(e);
        return learner_line(id, incarnation, "sent", f.str());
      case learner_event::kind::verdict:
        f << ",\"fragment\":" << e.fragment << ",\"sequence\":" << e.sequence
          << ",\"accepted\":" << (e.accepted ? "true" : "false");
        if (!e.accepted) f << ",\"reason\":\"" << to_string(e.reason) << '"';
        return learner_line(id, incarnation, "verdict", f.str());
      case learner_event::kind::adopted:
        f << ",\"fragment\":" << e.fragment << ",\"revision\":" << e.revision << ",\"overwritten\":" << e.work
          << counters(e);
        return learner_line(id, incarnation, "adopted", f.str());
      case learner_event::kind::waited: {
        const std::int64_t end = now_us();
        f << ",\"begin\":" << end - std::chrono::duration_cast<std::chrono::microseconds>(e.wait).count()
          << ",\"end\":" << end;
        return learner_line(id, incarnation, "wait", f.str());
      }
    }
  }

  /// The syncer's verdict on a contribution.
  void contribution(const contribution_event& e) {
    std::ostringstream f;
    f << ",\"learner\":" << e.learner << ",\"incarnation\":" << e.incarnation << ",\"sequence\":" << e.sequence
      << ",\"fragment\":" << e.fragment << ",\"base\":" << e.base_revision;
    if (!e.accepted) f << ",\"reason\":\"" << to_string(e.reason) << '"';
    write("syncer", e.accepted ? "accepted" : "rejected", f.str());
  }

  /// An outer update: fragment, new revision, and who was merged (filled
  /// when the syncer has an `on_contribution` hook).
  void merged(std::uint32_t fragment, std::uint64_t revision, std::span<const merged_contribution> merged) {
    std::ostringstream f;
    f << ",\"fragment\":" << fragment << ",\"revision\":" << revision << ",\"contributions\":[";
    for (std::size_t i = 0; i < merged.size(); ++i)
      f << (i ? "," : "") << '[' << merged[i].learner << ',' << merged[i].incarnation << ',' << merged[i].sequence
        << ']';
    f << "],\"staleness\":[";
    for (std::size_t i = 0; i < merged.size(); ++i) f << (i ? "," : "") << merged[i].staleness;
    f << ']';
    write("syncer", "merged", f.str());
  }

  /// A round the syncer dropped instead of publishing: fragment, its
  /// unchanged revision, why, and who was in it.
  void dropped(const drop_event& d) {
    std::ostringstream f;
    f << ",\"fragment\":" << d.fragment << ",\"revision\":" << d.revision << ",\"reason\":\"" << to_string(d.reason)
      << "\",\"contributions\":[";
    for (std::size_t i = 0; i < d.contributions.size(); ++i) {
      const auto& [c, norm] = d.contributions[i];
      f << (i ? "," : "") << '[' << c.learner << ',' << c.incarnation << ',' << c.sequence << ']';
    }
    f << ']';
    write("syncer", "dropped", f.str());
  }

  /// `[a,b,c]`.
  static std::string array(std::span<const std::uint64_t> values) {
    std::string s = "[";
    for (std::size_t i = 0; i < values.size(); ++i) s.append(i ? "," : "").append(std::to_string(values[i]));
    return s.append("]");
  }

 private:
  static std::string counters(const learner_event& e) {
    std::string s = ",\"steps\":";
    s.append(std::to_string(e.steps)).append(",\"wait_us\":");
    return s.append(std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(e.waited_total).count()));
  }

  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
};

}  // namespace diloco
