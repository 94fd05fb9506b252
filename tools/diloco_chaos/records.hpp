#pragma once
// Analysis pass: where in the trace the syncer merged, answered and was killed, for the passes that match
// contributions and time against those records.

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// Indices into the event list.
struct syncer_records {
  std::map<contribution_key, std::size_t> last_merge;  ///< key -> index of the last "merged" holding it
  std::set<contribution_key> accepted, answered;       ///< keys the syncer logged "accepted" / either verdict for
  std::set<contribution_key> merged_again;             ///< keys in more than one "merged"
  std::vector<std::size_t> merges;                     ///< every syncer "merged", in order
  std::vector<std::size_t> kills;                      ///< every runner "kill" of the (unsharded) syncer, in order
  /// Every runner "kill" of one shard of a sharded syncer, in order: the
  /// other shards go on merging, so its restart excuses no global downtime.
  std::vector<std::size_t> shard_kills;

  /// The last kill of any syncer process, if any.
  std::optional<std::size_t> last_kill() const {
    std::optional<std::size_t> k;
    if (!kills.empty()) k = kills.back();
    if (!shard_kills.empty()) k = std::max(k.value_or(0), shard_kills.back());
    return k;
  }
};

/// The key of the contribution an event names: learner, incarnation, sequence (-1 where absent).
inline contribution_key key_of(const event& e) {
  return {e.integer("learner").value_or(-1), e.integer("incarnation").value_or(-1), e.integer("sequence").value_or(-1)};
}

inline syncer_records index_syncer_records(const std::vector<event>& evs) {
  syncer_records out;
  for (std::size_t k = 0; k < evs.size(); ++k) {
    const event& e = evs[k];
    if (is(e, "runner", "kill") && e.text("target") == "syncer")
      (e.integer("shard") ? out.shard_kills : out.kills).push_back(k);
    if (e.src != "syncer") continue;
    if (e.ev == "merged") {
      out.merges.push_back(k);
      for (const auto& c : e.rows("contributions"))
        if (c.size() == 3) {
          const contribution_key key{c[0], c[1], c[2]};
          if (out.last_merge.contains(key)) out.merged_again.insert(key);
          out.last_merge[key] = k;
        }
    }
    if (e.ev == "accepted") out.accepted.insert(key_of(e));
    if (e.ev == "accepted" || e.ev == "rejected") out.answered.insert(key_of(e));
  }
  return out;
}

}  // namespace diloco_chaos
