// A learner's way out to the syncer: makes its messages (who it is, numbered)
// and sends them in order, keeping a bounded queue of those the transport
// refuses for now.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "diloco/metrics/counters.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/runtime/learner/options.hpp"

namespace diloco::detail {

/// Messages from one learner to the syncer, sent in the order they were
/// made. One the transport refuses waits here, and every later one queues
/// behind it (`learner_metrics::sends_deferred`); beyond `max` waiting
/// messages the oldest are dropped (`sends_dropped`). Never blocks. Holds
/// the pool outgoing payloads are drawn from.
template <class Transport>
class learner_outbox {
 public:
  /// `transport`, `options` and `metrics` are the learner's and outlive
  /// this; the learner's id and incarnation are read from `options` as each
  /// message is made, and at most `options.max_outbox` messages wait.
  learner_outbox(Transport& transport, const learner_options& options, learner_metrics& metrics) noexcept
      : transport_(transport), options_(options), metrics_(metrics) {}

  /// A message of `kind` from this learner, numbered with the next sequence
  /// number: 1, 2, 3, ...; for rank r of a unit of R ranks
  /// (`learner_options::share`) r + 1, r + 1 + R, r + 1 + 2R, ..., so that
  /// the ranks' numbers never meet and (learner, incarnation, sequence)
  /// names one message of the whole unit (docs/protocol.md, "Header").
  message make(message_kind kind) {
    message m;
    m.header.kind = kind;
    m.header.learner = options_.id;
    m.header.incarnation = options_.incarnation;
    m.header.sequence = next_sequence_;
    next_sequence_ += options_.share.count;
    return m;
  }

  /// A payload buffer of `bytes` (unspecified contents), from the pool the
  /// buffers of messages sent return to.
  byte_buffer acquire(std::size_t bytes) { return pool_.acquire(bytes); }

  /// Sends `m` now if nothing waits and the transport takes it; else queues
  /// it (moved from) behind what waits.
  void send(message& m) {
    if (queue_.empty() && !transport_.try_send(syncer_peer, m)) return;
    ++metrics_.sends_deferred;
    queue_.push_back(std::move(m));
    for (; queue_.size() > options_.max_outbox; ++metrics_.sends_dropped) queue_.pop_front();
  }

  /// Sends what waits, oldest first, until the transport refuses one.
  void flush() {
    while (!queue_.empty() && !transport_.try_send(syncer_peer, queue_.front())) queue_.pop_front();
  }

 private:
  Transport& transport_;
  const learner_options& options_;
  learner_metrics& metrics_;
  buffer_pool pool_;
  std::deque<message> queue_;
  std::uint64_t next_sequence_ = std::uint64_t{options_.share.index} + 1;
};

}  // namespace diloco::detail
