// The learner's fence against replaced syncers: the newest leadership epoch
// heard from each syncer shard, and the messages stamped with an older one
// dropped unread (docs/protocol.md, "Epochs").
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/learner/membership.hpp"

namespace diloco::detail {

/// The newest epoch heard from each syncer shard. A syncer that leads its
/// shard under a lease (a primary with a standby) stamps its epoch on every
/// message; once a standby has taken over with a larger one, whatever the
/// replaced primary still sends (it was paused or cut off past its lease)
/// carries an older epoch and must not be read. A syncer without
/// leadership stamps 0, which every learner admits until it has heard a
/// larger epoch from that shard.
class epoch_fence {
 public:
  /// Whether `h` may be read: another kind than a syncer's, or its epoch is at least the
  /// newest heard from its shard, which it then becomes. The shard is the
  /// welcome's own index (`fragment`, with S in `steps`), and for other
  /// kinds `fragment mod S`, S as the last admitted welcome said. Not
  /// fenced, for their shard is unknown: a bootstrap's welcome
  /// (`state_wanted`, which names no shard), and anything before the first
  /// welcome that names S.
  bool admit(const message_header& h) {
    raised_.reset();
    if (!wire::from_syncer(h.kind)) return true;  // not a syncer's: nothing to fence
    const bool welcome = h.kind == message_kind::welcome && !(h.flags & state_wanted);
    if (h.kind == message_kind::welcome && !welcome) return true;
    if (!welcome && !knows_shards_) return true;
    const std::uint64_t shards =
        welcome ? std::clamp<std::uint64_t>(h.steps, 1, max_syncer_shards) : std::uint64_t{shards_};
    const auto shard = static_cast<std::size_t>(shards > 1 ? h.fragment % shards : 0);
    if (shard >= newest_.size()) newest_.resize(shard + 1, 0);
    if (h.epoch < newest_[shard]) return false;
    raised_ = h.epoch > newest_[shard] ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(shard)) : std::nullopt;
    newest_[shard] = h.epoch;
    if (welcome) shards_ = static_cast<std::uint32_t>(shards), knows_shards_ = true;
    return true;
  }

  /// The newest epoch heard from `shard` (0: none, or none stamped).
  std::uint64_t newest(std::uint32_t shard) const noexcept { return shard < newest_.size() ? newest_[shard] : 0; }

  /// The shard whose epoch the last admitted message raised, if it did:
  /// what its replaced leader sent and the learner holds still unread must
  /// go too.
  std::optional<std::uint32_t> raised() const noexcept { return raised_; }
  /// S, as the last admitted welcome said (1 before any).
  std::uint32_t shards() const noexcept { return shards_; }

 private:
  std::vector<std::uint64_t> newest_;
  std::optional<std::uint32_t> raised_;
  bool knows_shards_ = false;
  std::uint32_t shards_ = 1;
};

}  // namespace diloco::detail
