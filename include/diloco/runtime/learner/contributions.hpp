// What a learner sends of its work and the answers it then waits for: the
// outer gradient Δ_p of a fragment, encoded against its base; the verdicts
// (ack or refusal) and the revisions that answer a send; and what to do when
// an answer does not come.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/protocol/reject_reason.hpp"
#include "diloco/runtime/learner/adoption.hpp"
#include "diloco/runtime/learner/fragments.hpp"
#include "diloco/runtime/learner/options.hpp"
#include "diloco/runtime/learner/reports.hpp"

namespace diloco::detail {

/// A learner's contributions: sends them through `Outbox`
/// (`learner_outbox`), keeps which are in flight and which still lack a
/// verdict, and decides when a missing answer is asked for again (a join,
/// which brings the fragment's current state) or given up.
template <class T, class Memory, class Outbox>
class learner_contributions {
 public:
  /// All are the learner's and outlive this.
  learner_contributions(learner_fragments<T, Memory>& fragments, learner_adoption<T, Memory>& adoption, Outbox& out,
                        const learner_options& options, learner_metrics& metrics, learner_reports& reports) noexcept
      : fragments_(fragments),
        adoption_(adoption),
        out_(out),
        options_(options),
        metrics_(metrics),
        reports_(reports) {}

  /// Sends fragment p's work since its last send, `Δ_p = base_p − θ_p`, as
  /// contribution `flags` at local step `step` and time `now` (one pass in
  /// `memory` reads θ_p and the base and writes the encoded bytes). Nothing
  /// goes out without new work, nor while a contribution of p is in flight
  /// against the same base (the syncer would refuse a second as a
  /// duplicate): with a rule that keeps work the send is owed until a new
  /// revision is taken in, otherwise it waits for the answer until that is
  /// `answer_timeout` overdue. With a rule that keeps work, a waiting
  /// revision is taken in first, so that Δ is computed against it. Returns
  /// false, sending nothing, when θ_p is not finite.
  bool send(std::uint32_t p, time_point now, std::uint8_t flags, std::uint64_t& step, Memory& memory,
            std::span<T> theta) {
    auto& f = fragments_[p];
    if (f.steps == f.steps_sent) return true;
    const bool keep = adoption_.keeps_work();
    if (keep) {
      if (f.inbox) adoption_.adopt(p, f.inbox_answers(), step, memory, theta);
      if (f.blocked()) {
        f.send_owed = true;
        return true;
      }
    } else if (f.in_flight && f.in_flight->base_revision == f.revision &&
               now - f.in_flight->at < options_.answer_timeout) {
      return true;
    }
    const fragment& frag = fragments_.plan()[p];
    message m = out_.make(message_kind::contribution);
    auto& h = m.header;
    h.codec = fragments_.codec();
    h.block = fragments_.block();
    h.fragment = p;
    h.base_revision = f.revision;
    h.revision = step;  // the local step, which `steps` cannot exceed
    h.tokens = f.tokens;
    h.steps = f.steps;
    h.element_count = frag.size();
    h.flags = flags;
    reports_.pace(h);
    // With error feedback the same pass writes the new residual.
    m.payload = out_.acquire(payload::size(h.codec, frag.size(), h.block));
    if (!memory.encode_delta(h.codec, h.block, frag.slices(), std::span<const T>(theta), f.base,
                             f.residual ? &*f.residual : nullptr, m.payload.bytes()))
      return false;
    metrics_.bytes_sent += m.payload.size();
    metrics_.steps_sent += f.steps - f.steps_sent;
    f.in_flight = in_flight_send{h.sequence, f.revision, step, now};
    unverdicted_.push_back({h.sequence, f.steps - f.steps_sent});
    if (unverdicted_.size() > max_unverdicted) unverdicted_.pop_front();
    f.last_sent = h.sequence;
    f.send_owed = false;
    if (keep) {
      // What was sent leaves the learner's account: the base moves to θ_p,
      // so the next Δ holds only later work, and the answer is applied
      // against this point.
      memory.pack(frag.slices(), std::span<const T>(theta), f.base);
      f.tokens = f.steps = 0;
    } else {
      f.steps_sent = f.steps;
    }
    if (!unanswered_since_) unanswered_since_ = now;
    ++metrics_.contributions_sent;
    if (reports_.wants_events())
      reports_.emit({.what = learner_event::kind::sent,
                     .fragment = p,
                     .sequence = h.sequence,
                     .revision = h.base_revision,
                     .work = h.steps});
    out_.send(m);
    return true;
  }

  /// The syncer accepted contribution `h.answers`.
  void accepted(const message_header& h) {
    ++metrics_.contributions_acked;
    unanswered_since_.reset();
    take_verdict(h.answers);
    if (h.fragment < fragments_.size()) {
      auto& f = fragments_[h.fragment];
      if (f.in_flight && f.in_flight->sequence == h.answers) f.in_flight->acked = true;
    }
    if (reports_.wants_events())
      reports_.emit(
          {.what = learner_event::kind::verdict, .fragment = h.fragment, .sequence = h.answers, .accepted = true});
  }

  /// The syncer refused contribution `h.answers` for `why`: it is no longer
  /// awaited (a stale or duplicate one also brings a resync update), and the
  /// fragment-steps it carried count as refused.
  void refused(const message_header& h, reject_reason why) {
    unanswered_since_.reset();
    ++metrics_.contributions_refused;
    metrics_.steps_refused += take_verdict(h.answers);
    if (reports_.wants_events())
      reports_.emit({.what = learner_event::kind::verdict,
                     .fragment = h.fragment,
                     .sequence = h.answers,
                     .accepted = false,
                     .reason = why});
    if (h.fragment < fragments_.size()) {
      auto& f = fragments_[h.fragment];
      if (f.in_flight && f.in_flight->sequence == h.answers) f.in_flight.reset();
    }
  }

  /// Whether the oldest contribution without a verdict has waited
  /// `rejoin_after` at `now`: the syncer may no longer know this learner
  /// here, so it joins again (the wait restarts).
  bool verdict_overdue(time_point now) noexcept {
    if (!unanswered_since_ || now - *unanswered_since_ < options_.rejoin_after) return false;
    unanswered_since_ = now;
    return true;
  }

  /// Rules that keep work, not lock-step: a fragment that waits to send
  /// (`fragment_track::waits`) because no revision came since its last send
  /// — the answer lost, or the syncer restarted and lost the round — asks
  /// for its current state `rejoin_after` after that send: the learner joins
  /// again and takes the state in place of the answer (rebased: the work
  /// since the send is kept; the work in flight is in that state if it was
  /// merged, and is lost otherwise), unless the state is still the send's
  /// base revision (`learner_adoption::receive`). After `answer_timeout` it
  /// gives the answer up. Returns whether to join again.
  bool chase_answers(time_point now, bool finishing) {
    bool resync = false;
    for (auto& f : fragments_) {
      if (!f.waits(finishing)) continue;
      if (!f.resync_wanted && now - f.in_flight->at >= options_.rejoin_after) {
        resync = f.resync_wanted = true;
      } else if (now - f.in_flight->at >= options_.answer_timeout) {
        f.in_flight.reset();
        f.resync_wanted = false;
        ++metrics_.answers_timed_out;
      }
    }
    return resync;
  }

  /// The transport moved to another syncer (a standby took over): every
  /// answer still awaited from the old one is chased now, as `chase_answers`
  /// does after `rejoin_after` (or, lock-step, `lock_step_wait`).
  void chase_all() noexcept {
    for (auto& f : fragments_)
      if (f.in_flight) f.resync_wanted = true;
  }

  /// Whether a lock-step learner waits for an answer, and whether it joins again.
  struct answer_wait {
    bool waiting = false;
    bool rejoin = false;
  };

  /// Lock-step only, at local step `step`: an answer is due (τ steps after
  /// its send) and missing. An answer overdue by `rejoin_after` may never
  /// come (a syncer restarted from a checkpoint has lost the round): the
  /// learner joins again and takes the fragment's current state in place of
  /// the answer (its work in flight is then lost, or merged later and
  /// adopted as a newer revision). One overdue by `answer_timeout` is given up.
  answer_wait lock_step_wait(time_point now, std::uint64_t step) {
    answer_wait w;
    if (!fragments_.config().lock_step) return w;
    for (auto& f : fragments_) {
      if (!f.in_flight || step < f.in_flight->step + fragments_.config().overlap) continue;
      if (now - f.in_flight->at >= options_.answer_timeout) {
        f.in_flight.reset();
        ++metrics_.answers_timed_out;
        continue;
      }
      if (now - f.in_flight->at >= options_.rejoin_after && !f.resync_wanted) w.rejoin = f.resync_wanted = true;
      w.waiting = true;
    }
    return w;
  }

  /// The earliest of `t` and the deadlines of the answers awaited: the
  /// verdict overdue, lock-step answers given up, answers chased (`finishing`).
  time_point next_deadline(time_point t, bool finishing) const {
    if (unanswered_since_) t = std::min(t, *unanswered_since_ + options_.rejoin_after);
    if (fragments_.config().lock_step)
      for (const auto& f : fragments_)
        if (f.in_flight) t = std::min(t, f.in_flight->at + options_.answer_timeout);
    if (adoption_.keeps_work())
      for (const auto& f : fragments_)
        if (f.waits(finishing))
          t = std::min(t, f.in_flight->at + (f.resync_wanted ? options_.answer_timeout : options_.rejoin_after));
    return t;
  }

 private:
  /// The fragment-steps contribution `sequence` carried, now that its
  /// verdict came (0 for one not sent, or no longer remembered).
  std::uint64_t take_verdict(std::uint64_t sequence) {
    const auto it = std::find_if(unverdicted_.begin(), unverdicted_.end(),
                                 [sequence](const auto& u) { return u.first == sequence; });
    if (it == unverdicted_.end()) return 0;
    const std::uint64_t steps = it->second;
    unverdicted_.erase(it);
    return steps;
  }

  learner_fragments<T, Memory>& fragments_;
  learner_adoption<T, Memory>& adoption_;
  Outbox& out_;
  const learner_options& options_;
  learner_metrics& metrics_;
  learner_reports& reports_;
  std::optional<time_point> unanswered_since_;  ///< oldest contribution still without a verdict
  /// Contributions without a verdict yet, (sequence, fragment-steps it
  /// carried), oldest first: a refusal counts its steps as refused. At most
  /// `max_unverdicted`; older ones are forgotten (verdicts come within a
  /// round trip).
  std::deque<std::pair<std::uint64_t, std::uint64_t>> unverdicted_;
  static constexpr std::size_t max_unverdicted = 256;
};

}  // namespace diloco::detail
