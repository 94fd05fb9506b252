// A learner's membership in a run: joining (and joining again), what the
// syncer's welcome says, the model it gives a syncer that has none, the
// refusals of who it is, and leaving.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/codec/blocks.hpp"
#include "diloco/error.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/protocol/reject_reason.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/runtime/learner/options.hpp"

namespace diloco::detail {

/// The most syncer shards a welcome may name.
inline constexpr std::uint64_t max_syncer_shards = 1 << 16;

/// What a welcome sets up: the schedule, how contributions are encoded, and
/// how many syncer shards there are.
struct welcome_terms {
  training_config config;
  codec_id codec = codec_id::none;  ///< the contributions' codec
  std::uint32_t block = 0;          ///< its block size when block-scaled, else 0
  bool compressed = false;          ///< `codec` is not the model's own full precision
  std::uint32_t shards = 1;         ///< syncer shards, each of which answers the leave
};

/// The terms of welcome `h` for a model of `T`s with `layout`:
/// `errc::layout_mismatch` when the syncer's model is another, and
/// `errc::bad_config` for a schedule that cannot be trained (no fragments,
/// more fragments than parameters, τ ≥ H, α outside [0, 1)) or a
/// contribution codec this learner cannot encode. Contributions use the
/// model's own full precision (also when the syncer names no codec), or a
/// compressed codec the welcome asks for.
template <class T>
result<welcome_terms> read_welcome(const message_header& h, const parameter_layout& layout) {
  if (h.layout != layout.fingerprint() || h.element_count != layout.size()) return errc::layout_mismatch;
  const bool full_precision = h.codec == codec_id::none || h.codec == codec_of<T>;
  const bool compressed = h.codec >= codec_id::bf16 && payload::readable<T>(h.codec, h.block);
  if ((!full_precision && !compressed) || h.fragment_count == 0 || h.fragment_count > layout.size() ||
      h.sync_period == 0 || h.overlap >= h.sync_period || !(h.mixing >= 0.0 && h.mixing < 1.0))
    return errc::bad_config;
  welcome_terms w;
  w.config = training_config{h.fragment_count, h.sync_period, h.overlap, h.mixing, h.lock_step != 0};
  w.shards = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(h.steps, 1, max_syncer_shards));
  w.codec = compressed ? h.codec : codec_of<T>;
  w.block = compressed ? h.block : 0;
  w.compressed = compressed;
  w.config.codecs.contributions = compressed ? h.codec : codec_id::f32;
  if (block_scaled(h.codec)) w.config.codecs.block = h.block;
  return w;
}

/// What a learner does about a refusal (`reject`) of who it is.
enum class identity_reply : std::uint8_t {
  contribution,  ///< not about who it is: a contribution's verdict
  none,          ///< counted; nothing more (a join retry goes on by itself)
  join,          ///< send a join now (again, or as the next incarnation)
  superseded,    ///< stop: a newer incarnation of this learner runs
  quarantined,   ///< stop: the syncer refuses this learner for good
};

/// Where one learner stands with the syncer: welcomed or not, when to join
/// again, and whether every shard answered its leave. Counts what it does
/// in the learner's `metrics`.
class learner_membership {
 public:
  /// `options` and `metrics` are the learner's and outlive this.
  learner_membership(const learner_options& options, learner_metrics& metrics) noexcept
      : options_(options), metrics_(metrics) {}

  bool welcomed() const noexcept { return welcomed_; }

  /// The welcome's `terms` hold: the learner is a member, answered by the
  /// shards of its share of `ranks` (`learner_options::share`).
  void welcome(const welcome_terms& terms, std::uint32_t ranks = 1) noexcept {
    shards_ = terms.shards / ranks;
    welcomed_ = true;
  }

  /// Fills a join sent at `now` for a model with `layout`; the next retry
  /// falls due `join_retry` later.
  void join(message_header& h, const parameter_layout& layout, time_point now) {
    h.layout = layout.fingerprint();
    h.element_count = layout.size();
    ++metrics_.joins_sent;
    next_join_ = now + options_.join_retry;
  }

  /// When the next join retry falls due (none before the first join).
  std::optional<time_point> next_join() const noexcept { return next_join_; }
  bool join_due(time_point now) const noexcept { return !next_join_ || now >= *next_join_; }

  /// True once, the first time the learner has every fragment: the join is to be announced.
  bool announce() noexcept { return !std::exchange(announced_, true); }

  /// The answer to a refusal `h` for reason `why` received at `now`. A
  /// welcomed learner the syncer does not know here (forgotten, or a new
  /// connection) joins again, at most once per `join_retry`; one not started
  /// yet whose incarnation is over takes the next (`incarnation` is
  /// updated); a welcomed one whose incarnation is over stops.
  identity_reply refused(reject_reason why, const message_header& h, time_point now, std::uint32_t& incarnation) {
    switch (why) {
      case reject_reason::peer_conflict:
        ++metrics_.identity_conflicts;  // ours, or someone claiming us: the join retry goes on
        return identity_reply::none;
      case reject_reason::unknown_learner:
      case reject_reason::wrong_peer:
        if (!welcomed_ || (last_rejoin_ && now - *last_rejoin_ < options_.join_retry)) return identity_reply::none;
        last_rejoin_ = now;
        ++metrics_.rejoins_sent;
        return identity_reply::join;
      case reject_reason::dead_incarnation:
        if (!welcomed_ && h.revision >= incarnation && h.revision < std::numeric_limits<std::uint32_t>::max()) {
          incarnation = static_cast<std::uint32_t>(h.revision) + 1;
          ++metrics_.incarnations_skipped;
          return identity_reply::join;
        }
        return welcomed_ ? identity_reply::superseded : identity_reply::none;
      case reject_reason::quarantined: return identity_reply::quarantined;
      case reject_reason::too_many_learners:
        ++metrics_.joins_refused;  // the join retry goes on: a place frees when a learner leaves or dies
        return identity_reply::none;
      case reject_reason::unexpected_kind:
      case reject_reason::unknown_incarnation:
        ++metrics_.messages_refused;  // not about a contribution
        return identity_reply::none;
      default: return identity_reply::contribution;
    }
  }

  /// The leave went out as message `sequence`.
  void left(std::uint64_t sequence) noexcept { leave_sequence_ = sequence; }

  /// Whether `h` answers the leave (an ack or a refusal; counted).
  bool answers_leave(const message_header& h) noexcept {
    if (!leave_sequence_ || h.answers != *leave_sequence_ ||
        (h.kind != message_kind::ack && h.kind != message_kind::reject))
      return false;
    ++leave_answers_;
    return true;
  }

  /// Every syncer shard answered the leave.
  bool leave_answered() const noexcept { return leave_sequence_ && leave_answers_ >= shards_; }

  /// Gives a syncer that starts without a model (a welcome that asks for
  /// the state) this learner's: the layout, then the `fragments` fragments
  /// of θ, read from `memory` in the model's precision. Cost: θ copied once
  /// to the host and sent.
  template <class T, class Outbox, class Memory>
  void send_state(Outbox& out, Memory& memory, std::span<const T> theta, const parameter_layout& layout,
                  std::uint32_t fragments) {
    message l = out.make(message_kind::layout);
    const auto description = wire::encode_layout(layout);
    l.header.codec = codec_id::bytes;
    l.header.element_count = description.size();
    l.header.layout = layout.fingerprint();
    l.payload = byte_buffer(description.size());
    std::copy(description.begin(), description.end(), l.payload.data());
    out.send(l);
    const auto plan = fragment_plan::balanced(layout, fragments);
    for (std::uint32_t p = 0; p < fragments; ++p) {
      message m = out.make(message_kind::state);
      m.header.codec = codec_of<T>;
      m.header.fragment = p;
      m.header.element_count = plan[p].size();
      m.payload = out.acquire(plan[p].size() * sizeof(T));
      memory.gather(plan[p].slices(), theta, m.payload.template as<T>());
      metrics_.bytes_sent += m.payload.size();
      out.send(m);
    }
    ++metrics_.states_sent;
  }

 private:
  const learner_options& options_;
  learner_metrics& metrics_;
  bool welcomed_ = false;
  bool announced_ = false;
  std::uint32_t shards_ = 1;
  std::optional<time_point> next_join_;
  std::optional<time_point> last_rejoin_;        ///< the last join sent because the syncer did not know us here
  std::optional<std::uint64_t> leave_sequence_;  ///< the leave's, once sent
  std::uint32_t leave_answers_ = 0;              ///< shards that answered it
};

}  // namespace diloco::detail
