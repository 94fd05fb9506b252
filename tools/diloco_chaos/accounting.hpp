#pragma once
// Analysis pass: what became of every contribution (docs/chaos.md, "Accounting": no silent loss).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "records.hpp"
#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// A syncer "accepted" is merged (its key in a later "merged"), else lost_in_syncer_restart (a syncer "kill" follows
/// it), else unaccounted. A learner "verdict" accepted=true without a syncer "accepted" of its key is unaccounted. A
/// "sent" with neither "accepted" nor "rejected" is unanswered: the message may have died with a killed process.
inline accounting account_contributions(const std::vector<event>& evs, const syncer_records& records) {
  accounting a;
  a.merged_again = records.merged_again.size();
  const auto unaccounted = [&a](const contribution_key& key, const char* why) {
    if (++a.unaccounted <= 10)
      a.unaccounted_keys.push_back("learner " + std::to_string(std::get<0>(key)) + " incarnation " +
                                   std::to_string(std::get<1>(key)) + " sequence " + std::to_string(std::get<2>(key)) +
                                   ": " + why);
  };
  for (std::size_t k = 0; k < evs.size(); ++k) {
    const event& e = evs[k];
    const contribution_key key = key_of(e);
    if (is(e, "learner", "verdict") && e.flag("accepted") && !records.accepted.count(key)) {
      unaccounted(key, "acknowledged as accepted, but the syncer never logged \"accepted\"");
    } else if (is(e, "learner", "sent") && std::get<0>(key) >= 0) {
      ++a.sent;
      a.unanswered += !records.answered.count(key);
    } else if (is(e, "syncer", "accepted")) {
      ++a.accepted;
      const auto merged = records.last_merge.find(key);
      if (merged != records.last_merge.end() && merged->second > k)
        ++a.merged;
      else if (const auto kill = records.last_kill(); kill && *kill > k)
        ++a.lost_in_syncer_restart;
      else
        unaccounted(key, "accepted by the syncer, never merged, no syncer kill after it");
    } else if (is(e, "syncer", "rejected")) {
      ++a.rejected, ++a.rejected_by_reason[e.get<std::string>("reason") ? std::string(e.text("reason")) : "unknown"];
    }
  }
  return a;
}

}  // namespace diloco_chaos
