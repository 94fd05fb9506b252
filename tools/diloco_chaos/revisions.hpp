#pragma once
// Analysis pass: each fragment's global revision over time, its staleness, and whether any learner saw a revision
// go backwards.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// Fragments the trace names: 1 + the highest "fragment" field, or the length of a "revisions" list in "joined" or
/// the syncer's "start", whichever is more; at most 2^16, so that a garbage index cannot size the tables.
inline std::size_t count_fragments(const std::vector<event>& evs) {
  constexpr std::size_t max_fragments = 1 << 16;
  std::size_t fragments = 0;
  for (const event& e : evs) {
    if (const auto f = e.integer("fragment"); f && *f >= 0)
      fragments = std::max(fragments, std::min(static_cast<std::size_t>(*f), max_fragments - 1) + 1);
    if (e.ev == "joined" || is(e, "syncer", "start"))
      fragments = std::max(fragments, std::min(e.integers("revisions").size(), max_fragments));
  }
  return fragments;
}

/// Fills revisions (points from every syncer "merged", a syncer "start", and the first "joined" of a fragment not
/// drawn yet; times clamped to the run window), per_fragment and staleness, and violations: per learner id (all
/// incarnations) and fragment, a revision seen in "joined" or "adopted" below the highest seen before (of a unit's
/// rank, only the fragments it speaks for: speaks_for); and revisions_with_two_contents: the (fragment, revision)
/// pairs whose "adopted" lines carry more than one "crc" (of the fragments the adopting rank speaks for).
inline void trace_revisions(const std::vector<event>& evs, const run_window& w, std::size_t fragments, report& r) {
  r.fragments = static_cast<std::uint32_t>(fragments);
  std::map<std::pair<std::int64_t, std::size_t>, std::int64_t> seen;  // (learner, fragment) -> highest revision
  std::vector<double> stale_sum(fragments), stale_max(fragments), stale_n(fragments);
  std::vector<std::uint64_t> merges(fragments);
  std::vector<std::int64_t> final_revision(fragments);
  std::vector<bool> plotted(fragments);
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> content;  // (fragment, revision) -> first CRC seen
  std::set<std::pair<std::int64_t, std::int64_t>> twice;
  const auto point = [&](std::int64_t t, std::size_t f, std::int64_t revision) {
    r.revisions.push_back({w.at(std::clamp(t, w.lo, w.hi)), static_cast<std::uint32_t>(f),
                           static_cast<std::uint64_t>(std::max<std::int64_t>(0, revision))});
    plotted[f] = true;
  };
  const auto see = [&](const event& e, std::int64_t learner, std::int64_t fragment, std::int64_t revision) {
    if (fragment < 0) return;
    const auto [it, fresh] = seen.try_emplace({learner, static_cast<std::size_t>(fragment)}, revision);
    if (!fresh && revision < it->second)
      r.violations.push_back({learner, e.integer("incarnation").value_or(-1), static_cast<std::uint32_t>(fragment),
                              it->second, revision, w.at(e.t)});
    it->second = std::max(it->second, revision);
  };
  for (const event& e : evs) {
    const std::int64_t learner = e.integer("learner").value_or(-1), fragment = e.integer("fragment").value_or(-1);
    const std::vector<std::int64_t>& revs = e.integers("revisions");
    if (is(e, "learner", "joined") && learner >= 0) {
      for (std::size_t f = 0; f < revs.size(); ++f) {
        if (!speaks_for(e, static_cast<std::int64_t>(f))) continue;
        see(e, learner, static_cast<std::int64_t>(f), revs[f]);
        if (f < fragments && !plotted[f]) point(e.t, f, revs[f]);
      }
    } else if (is(e, "learner", "adopted") && learner >= 0) {
      see(e, learner, fragment, e.integer("revision").value_or(0));
      if (const auto crc = e.integer("crc"); crc && speaks_for(e, fragment)) {
        const std::pair key{fragment, e.integer("revision").value_or(0)};
        if (const auto [it, fresh] = content.try_emplace(key, *crc); !fresh && it->second != *crc) twice.insert(key);
      }
    } else if (is(e, "syncer", "start")) {
      for (std::size_t f = 0; f < std::min(revs.size(), fragments); ++f)
        if (revs[f] >= 0) point(e.t, f, revs[f]);  // −1: a fragment another shard owns
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
  r.revisions_with_two_contents = twice.size();
}

}  // namespace diloco_chaos
