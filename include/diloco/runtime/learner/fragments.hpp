// A learner's fragments: the plan and schedule its welcome set, and per
// fragment the base, the error-feedback residual, the work counters, the
// contribution in flight and the global revision waiting to be taken in.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/runtime/learner/options.hpp"
#include "diloco/runtime/learner/state.hpp"

namespace diloco::detail {

/// A contribution of one fragment that has had no answer yet.
struct in_flight_send {
  std::uint64_t sequence;
  std::uint64_t base_revision;
  std::uint64_t step;  ///< the local step it was sent at
  time_point at;
  bool acked = false;  ///< the syncer accepted it (an ack came): it holds it, durably if it journals
};

/// A global fragment that arrived and waits to be taken in.
struct received_update {
  std::uint64_t revision;
  std::uint64_t answers;  ///< the latest contribution of this learner it answers (0: none)
  update_status status;
  codec_id codec;
  std::uint32_t block;
  byte_buffer payload;      ///< as it arrived (checked), decoded where θ lives when adopted
  std::uint64_t epoch = 0;  ///< of the syncer leadership that sent it (docs/protocol.md, "Epochs")
};

/// One fragment p on a learner; its buffers live in the model's memory
/// space `Memory`.
template <class T, class Memory>
struct fragment_track {
  bool adopted = false;
  std::uint64_t revision = 0;
  typename Memory::template buffer<T> base;  ///< Θ_p at `revision`, packed
  /// Error feedback: what the codec rounded away from Δ_p, to send next time (packed).
  std::optional<typename Memory::template buffer<T>> residual;
  std::uint64_t tokens = 0;
  std::uint64_t steps = 0;
  /// Of `steps`, those a contribution against this base carried already
  /// (`adoption_rule::overwrite` and lock-step runs, whose counters
  /// restart at adoption, not at a send).
  std::uint64_t steps_sent = 0;
  /// The fragment fell due while a contribution of it was in flight against
  /// the same base: it is sent as soon as a new revision is taken in.
  bool send_owed = false;
  std::optional<in_flight_send> in_flight;
  std::optional<received_update> inbox;
  std::uint64_t last_sent = 0;  ///< sequence of the latest contribution of this fragment
  std::uint64_t resynced = 0;   ///< the send whose resync was taken even though older
  bool resync_wanted = false;   ///< asked for the current state in place of an overdue answer
  bool resumed = false;         ///< θ_p and the counters were kept from a loaded state at the join

  /// The waiting update answers the contribution in flight (or a later one).
  /// Precondition: `inbox`.
  bool inbox_answers() const noexcept { return in_flight && inbox->answers >= in_flight->sequence; }

  /// The unsent work cannot go out yet: a contribution of this fragment is
  /// in flight against its current base revision.
  bool blocked() const noexcept { return in_flight && in_flight->base_revision == revision && steps > steps_sent; }

  /// Waits for a revision to send (due, or the learner finishing).
  bool waits(bool finishing) const noexcept { return blocked() && (send_owed || finishing); }
};

/// Whether adoptions keep the learner's work: a run that is not lock-step,
/// with the `rebase` or `lazy` rule.
constexpr bool keeps_work(const training_config& config, adoption_rule rule) noexcept {
  return !config.lock_step && rule != adoption_rule::overwrite;
}

/// Every fragment of one learner, indexed by p. Empty until `setup`.
template <class T, class Memory>
class learner_fragments {
 public:
  using track = fragment_track<T, Memory>;

  /// Sets up the schedule a welcome gave, `config` (P, H, τ, α, lock-step,
  /// codecs), with contributions encoded as `codec` (`block`: its block size,
  /// 0 unless block-scaled): the plan over `layout`, and for each fragment
  /// of `share` a base in `memory` and, with `residuals`, an error-feedback
  /// buffer. Cost: one allocation of the fragment's size per buffer.
  void setup(const training_config& config, codec_id codec, std::uint32_t block, const parameter_layout& layout,
             Memory& memory, bool residuals, fragment_share share = {}) {
    config_ = config;
    codec_ = codec;
    block_ = block;
    share_ = share;
    plan_ = fragment_plan::balanced(layout, config_.fragments);
    schedule_ = fragment_schedule(config_.sync_period, config_.fragments);
    tracks_.clear();
    tracks_.resize(config_.fragments);
    owned_ = 0;
    for (std::uint32_t p = 0; p < config_.fragments; ++p) {
      if (!share.owns(p)) continue;
      ++owned_;
      tracks_[p].base = memory.template allocate<T>(plan_[p].size());
      if (residuals) tracks_[p].residual = memory.template allocate<T>(plan_[p].size());
    }
  }

  /// Whether this learner speaks for fragment p (`learner_options::share`).
  bool owns(std::uint32_t p) const noexcept { return p < tracks_.size() && share_.owns(p); }

  const training_config& config() const noexcept { return config_; }
  const fragment_plan& plan() const noexcept { return plan_; }
  const fragment_schedule& schedule() const noexcept { return schedule_; }
  codec_id codec() const noexcept { return codec_; }       ///< the contributions', from the welcome
  std::uint32_t block() const noexcept { return block_; }  ///< the welcome's, for a block-scaled codec

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(tracks_.size()); }
  track& operator[](std::uint32_t p) noexcept { return tracks_[p]; }
  const track& operator[](std::uint32_t p) const noexcept { return tracks_[p]; }
  auto begin() noexcept { return tracks_.begin(); }
  auto end() noexcept { return tracks_.end(); }
  auto begin() const noexcept { return tracks_.begin(); }
  auto end() const noexcept { return tracks_.end(); }

  /// Counts a fragment taken in for the first time; returns whether every
  /// fragment it speaks for now has been (the join is complete).
  bool first_adoption() noexcept { return ++adopted_ == owned_; }
  /// Every fragment it speaks for has been taken in once (true while there are none).
  bool all_adopted() const noexcept { return adopted_ == owned_; }

  /// Some fragment's unsent work waits behind a contribution in flight.
  bool any_blocked() const noexcept {
    return std::any_of(tracks_.begin(), tracks_.end(), [](const track& f) { return f.blocked(); });
  }

  /// Each fragment's adopted revision, by p.
  std::vector<std::uint64_t> revisions() const {
    std::vector<std::uint64_t> r;
    for (const auto& f : tracks_) r.push_back(f.revision);
    return r;
  }

  /// Writes the schedule and one record per fragment into `s`: revision,
  /// base and residual (read from `memory` to the host), counters, and
  /// whether it can be resumed (one it speaks for, no contribution of it in
  /// flight; one it does not has an empty base).
  void save(learner_state<T>& s, Memory& memory) const {
    s.config = config_;
    for (std::uint32_t p = 0; p < tracks_.size(); ++p) {
      const auto& f = tracks_[p];
      std::vector<T> base(f.base.size());
      memory.read(std::span<const T>(f.base.data(), f.base.size()), std::span<T>(base));
      std::vector<T> residual(f.residual ? f.residual->size() : 0);
      if (f.residual) memory.read(std::span<const T>(f.residual->data(), f.residual->size()), std::span<T>(residual));
      s.fragments.push_back(
          {owns(p) && !f.in_flight, f.revision, std::move(base), f.tokens, f.steps, std::move(residual)});
    }
  }

 private:
  training_config config_;
  fragment_plan plan_;
  fragment_schedule schedule_;
  std::vector<track> tracks_;
  codec_id codec_ = codec_of<T>;
  std::uint32_t block_ = 0;
  fragment_share share_{};
  std::size_t owned_ = 0;  ///< fragments of `share_`
  std::size_t adopted_ = 0;
};

}  // namespace diloco::detail
