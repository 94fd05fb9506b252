// Starting a syncer that knows nothing about the model: the first learner to
// join provides the parameter layout and the initial global parameters.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "diloco/concepts/check.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// Collects the model for a syncer service (docs/protocol.md, "Session").
///
/// The first learner to join is answered with a welcome flagged
/// `state_wanted`; it replies with a `layout` message and one `state` message
/// per fragment (its own initial parameters). Joins that arrive meanwhile are
/// held and handed back by `take_joins`, to be replayed into the syncer built
/// from `layout()` and `initial()`. If the chosen learner does not deliver
/// within `patience`, the next learner to join is asked instead. Everything
/// it cannot use — another model's join, a layout or state from anyone but
/// the chosen learner, a malformed layout or state, a state with a NaN or an
/// infinity — is counted in `refused()`; a chosen learner that sent a
/// malformed layout or a non-finite state is never asked again (its join
/// is still handed to the syncer), and the next learner to join is asked.
///
/// `T` is the model's scalar type. Constrained by the concepts; the transport's
/// check comes first, so that a transport that misses a requirement gets an
/// error naming the missing member.
template <scalar T, class Transport>
requires(check_transport<Transport>() && transport<Transport>) class bootstrap {
 public:
  /// `expected`: a layout given up front (from a file); learners with another
  /// layout are refused. `max_elements` bounds the model a learner may announce.
  bootstrap(Transport& transport, training_config config, std::optional<parameter_layout> expected = std::nullopt,
            std::chrono::nanoseconds patience = std::chrono::seconds(10),
            std::uint64_t max_elements = std::uint64_t{1} << 32)
      : transport_(transport),
        config_(config),
        expected_(std::move(expected)),
        patience_(patience),
        max_elements_(max_elements) {}

  /// Handles one message; returns `ready()`.
  bool handle(envelope&& e, time_point now) {
    if (ready()) return true;
    if (e.error != wire_error::none) return refuse();
    auto& h = e.msg.header;
    switch (h.kind) {
      case message_kind::join: on_join(std::move(e), now); break;
      case message_kind::layout: on_layout(e); break;
      case message_kind::state: on_state(e); break;
      default: break;  // heartbeats and the like wait for the syncer
    }
    return ready();
  }

  bool ready() const noexcept { return layout_.has_value() && received_ == plan_.count() && plan_.count() > 0; }
  const parameter_layout& layout() const { return *layout_; }
  std::span<const T> initial() const noexcept { return initial_; }
  std::uint64_t refused() const noexcept { return refused_; }

  /// The joins held while waiting, oldest first (one per learner incarnation).
  std::vector<envelope> take_joins() { return std::exchange(joins_, {}); }

 private:
  struct source {
    peer_id peer;
    std::uint32_t learner;
    std::uint32_t incarnation;
    std::uint64_t layout;  ///< fingerprint announced in its join
    std::uint64_t elements;
    time_point asked;
  };

  bool refuse() {
    ++refused_;
    return ready();
  }

  bool from_source(const envelope& e) const {
    return source_ && e.from == source_->peer && e.msg.header.learner == source_->learner &&
           e.msg.header.incarnation == source_->incarnation;
  }

  void on_join(envelope&& e, time_point now) {
    const auto& h = e.msg.header;
    if (h.learner == syncer_peer || h.element_count == 0 || h.element_count > max_elements_) {
      refuse();
      return;
    }
    if (expected_ && (h.layout != expected_->fingerprint() || h.element_count != expected_->size())) {
      // Tell it which model this syncer serves, so that it stops with a
      // layout mismatch instead of waiting.
      message m = welcome_message<T>(h.learner, h.incarnation, expected_->fingerprint(), expected_->size(), config_);
      (void)transport_.try_send(e.from, m);
      refuse();
      return;
    }
    // A learner whose layout or state was refused is not asked again (it
    // would hold the bootstrap by rejoining first each time); nor is the
    // chosen one once its patience ran out while another one waits.
    if (refused_sources_.contains({h.learner, h.incarnation})) {
      hold(std::move(e));
      return;
    }
    const bool chosen = from_source(e);
    if (!chosen && (!source_ || now - source_->asked > patience_)) {
      source_ = source{e.from, h.learner, h.incarnation, h.layout, h.element_count, now};
      layout_.reset();
      received_ = 0;
      ask(h);
    } else if (chosen && now - source_->asked > patience_) {
      // Nothing usable in time: ask another learner that is waiting, if
      // one is (a silent source must not hold the bootstrap by rejoining
      // first); otherwise this one again (our request may have been lost).
      const auto other = std::find_if(joins_.begin(), joins_.end(), [&](const envelope& held) {
        const auto& j = held.msg.header;
        return j.learner != h.learner && !refused_sources_.contains({j.learner, j.incarnation});
      });
      if (other != joins_.end()) {
        const auto& j = other->msg.header;
        source_ = source{other->from, j.learner, j.incarnation, j.layout, j.element_count, now};
        layout_.reset();
        received_ = 0;
        ask(j);
      } else {
        source_->asked = now;
        ask(h);
      }
    }
    hold(std::move(e));
  }

  /// Keeps the latest join of each learner, to hand to the syncer.
  void hold(envelope&& e) {
    const auto& h = e.msg.header;
    std::erase_if(joins_, [&](const envelope& held) {
      return held.msg.header.learner == h.learner && held.msg.header.incarnation <= h.incarnation;
    });
    joins_.push_back(std::move(e));
  }

  /// The chosen learner sent something unusable: never ask it again.
  bool refuse_source() {
    if (source_) refused_sources_.insert({source_->learner, source_->incarnation});
    source_.reset();
    layout_.reset();
    received_ = 0;
    return refuse();
  }

  void ask(const message_header& join) {
    message m =
        welcome_message<T>(join.learner, join.incarnation, join.layout, join.element_count, config_, state_wanted);
    (void)transport_.try_send(source_->peer, m);
  }

  void on_layout(const envelope& e) {
    if (!from_source(e) || e.msg.header.codec != codec_id::bytes) return void(refuse());
    auto layout = wire::decode_layout(e.msg.payload.bytes(), max_elements_);
    if (!layout || layout->fingerprint() != source_->layout || layout->size() != source_->elements ||
        config_.fragments > layout->size())
      return void(refuse_source());
    plan_ = fragment_plan::balanced(*layout, config_.fragments);
    initial_.assign(layout->size(), T(0));
    have_.assign(plan_.count(), false);
    received_ = 0;
    layout_ = std::move(layout);
  }

  void on_state(const envelope& e) {
    const auto& h = e.msg.header;
    if (!from_source(e) || !layout_ || h.fragment >= plan_.count() || h.codec != codec_of<T> ||
        h.element_count != plan_[h.fragment].size() || e.msg.payload.size() != h.element_count * sizeof(T))
      return void(refuse());
    const auto values = e.msg.payload.template as<const T>();
    if (!std::all_of(values.begin(), values.end(), [](T v) { return std::isfinite(v); })) return void(refuse_source());
    plan_.scatter<T>(h.fragment, values, initial_);
    if (!have_[h.fragment]) ++received_;
    have_[h.fragment] = true;
  }

  Transport& transport_;
  training_config config_;
  std::optional<parameter_layout> expected_;
  std::chrono::nanoseconds patience_;
  std::uint64_t max_elements_;
  std::optional<source> source_;
  std::optional<parameter_layout> layout_;
  fragment_plan plan_;
  std::vector<T> initial_;
  std::vector<bool> have_;
  std::size_t received_ = 0;
  std::vector<envelope> joins_;
  std::set<std::pair<std::uint32_t, std::uint32_t>> refused_sources_;  ///< (learner, incarnation)
  std::uint64_t refused_ = 0;
};

}  // namespace diloco
