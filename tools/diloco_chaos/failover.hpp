#pragma once
// Analysis pass for runs with standby syncers (diloco_chaos --standby): each leadership's epoch, how long each
// syncer fault took to fail over, and every adoption a learner made from a replaced leader (docs/chaos.md,
// "Standby syncers").

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// The shard an event's fragment belongs to, of `shards`.
inline std::int64_t shard_of_fragment(std::int64_t fragment, std::int64_t shards) {
  return shards > 1 ? fragment % shards : 0;
}

/// Fills r.epochs, r.failovers, r.split_brain and r.epoch_regressions. A leadership begins at a syncer "start" with
/// an "epoch"; a fault is a runner "kill", "pause" or "cut" of a syncer before the run's end; its failover ends at the
/// first "merged" of one of the shard's fragments stamped with the epoch of the first start of the shard with a
/// larger epoch than any before the fault (or a later one). A split-brain publication is a "merged" stamped with an
/// epoch smaller than that of a leadership of the same shard that began before it: a replaced leader published a
/// revision while its successor led. An epoch regression is a learner's "adopted" stamped with a smaller epoch than one
/// it adopted before for the same shard (per incarnation and rank): it took a revision from a replaced leader after
/// hearing its successor.
inline void trace_failovers(const std::vector<event>& evs, const run_window& w, report& r) {
  std::int64_t shards = 1;
  for (const event& e : evs)
    if (is(e, "syncer", "start")) shards = std::max(shards, e.integer("shard").value_or(0) + 1);
  struct begun {
    std::int64_t t, epoch;
  };
  std::map<std::int64_t, std::vector<begun>> starts;  // shard -> leaderships, in trace order
  for (const event& e : evs)
    if (is(e, "syncer", "start") && e.integer("epoch").value_or(0) > 0) {
      const auto shard = e.integer("shard").value_or(0);
      starts[shard].push_back({e.t, *e.integer("epoch")});
      r.epochs.push_back(
          {static_cast<std::uint32_t>(shard), static_cast<std::uint64_t>(*e.integer("epoch")), w.at(e.t)});
    }
  const auto newest_before = [&](std::int64_t shard, std::int64_t t) {
    std::int64_t epoch = 0;
    for (const begun& b : starts[shard])
      if (b.t <= t) epoch = std::max(epoch, b.epoch);
    return epoch;
  };
  for (std::size_t k = 0; k < evs.size(); ++k) {
    const event& fault = evs[k];
    if (fault.src != "runner" || (fault.ev != "kill" && fault.ev != "pause" && fault.ev != "cut") ||
        fault.text("target") != "syncer")
      continue;
    if (fault.t >= w.hi) break;  // a process killed at the end, not a fault
    const auto shard = fault.integer("shard").value_or(0);
    failover f{static_cast<std::uint32_t>(shard), fault.ev, w.at(fault.t), -1, -1};
    const std::int64_t old_epoch = newest_before(shard, fault.t);
    std::optional<std::int64_t> led;  // the new leadership's epoch
    for (std::size_t j = k + 1; j < evs.size(); ++j) {
      const event& e = evs[j];
      if (!led && is(e, "syncer", "start") && e.integer("shard").value_or(0) == shard &&
          e.integer("epoch").value_or(0) > old_epoch) {
        led = e.integer("epoch");
        f.led_s = w.at(e.t);
      } else if (led && is(e, "syncer", "merged") && e.integer("epoch").value_or(0) >= *led &&
                 shard_of_fragment(e.integer("fragment").value_or(-1), shards) == shard) {
        f.published_s = w.at(e.t);
        break;
      }
    }
    r.failovers.push_back(f);
  }
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>, std::int64_t> adopted;
  for (const event& e : evs) {
    const auto epoch = e.integer("epoch").value_or(0);
    if (epoch <= 0) continue;
    const auto shard = shard_of_fragment(e.integer("fragment").value_or(0), shards);
    if (is(e, "syncer", "merged") && epoch < newest_before(shard, e.t)) ++r.split_brain;
    if (!is(e, "learner", "adopted")) continue;
    auto& seen = adopted[{e.integer("learner").value_or(-1), e.integer("incarnation").value_or(-1),
                          e.integer("rank").value_or(0), shard}];
    if (epoch < seen) ++r.epoch_regressions;
    seen = std::max(seen, epoch);
  }
}

}  // namespace diloco_chaos
