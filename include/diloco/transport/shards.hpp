// A learner's connections to a sharded syncer, seen as one transport.
//
// A syncer grows past one machine by sharding fragments: S syncer processes,
// shard s owning the fragments p with p mod S = s (`syncer_options::shard`):
// it merges them, checkpoints them and serves them. A learner connects to
// every shard and hands its learner `sharded<Transport>` over those
// connections: a contribution goes to the shard that owns its fragment;
// joins, heartbeats, leaves and the initial state go to every shard; what
// arrives from any shard comes out of one queue. Each shard's welcome names
// its index and S (docs/protocol.md, "Sharded syncers"), so the order of the
// connections does not matter. A shard that is down costs only its own
// fragments' progress: the others keep merging. For that, what a shard's
// connection refuses waits in that shard's own queue (the learner's outbox
// would hold every later message, to every shard, behind it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/transport/detail/duplicate.hpp"

namespace diloco {

/// What `sharded` found wrong in the shards' welcomes.
enum class shard_error : std::uint8_t {
  none,
  count_mismatch,  ///< a welcome names a number of shards other than the connections given (or `of`)
  index_conflict,  ///< two connections' welcomes name the same shard (or one changed its index)
};

/// One transport over the connections to the S shards of a syncer (one
/// `Transport` each, not owned). Not thread-safe, like the learner it serves.
template <class Transport>
requires transport<Transport>
class sharded {
 public:
  /// `shards`: one connection per syncer shard, in any order; at least one.
  /// `of`: the syncer's number of shards when `shards` connects to some of
  /// them only — a rank of a learner unit connects to its share
  /// (`learner_options::share`) — or 0 when it connects to all.
  explicit sharded(std::vector<Transport*> shards, std::uint32_t of = 0)
      : shards_(std::move(shards)),
        of_(of),
        index_(shards_.size()),
        pending_(shards_.size()),
        wants_state_(shards_.size(), false) {
    if (shards_.empty()) throw std::invalid_argument("diloco::sharded: at least one shard");
    for (auto* t : shards_)
      if (!t) throw std::invalid_argument("diloco::sharded: a null transport");
    if (of_ != 0 && of_ < shards_.size())
      throw std::invalid_argument("diloco::sharded: more connections than the syncer has shards");
  }

  /// A contribution to the shard that owns its fragment (`errc::unknown_peer`
  /// until that shard has welcomed this learner); the model (layout, state)
  /// to every shard that has not welcomed this learner or asked for it since
  /// (a new leader without it); anything else to every shard. A message a shard's connection refuses waits in that
  /// shard's queue (at most `max_pending`, the oldest dropped beyond) and is sent before anything newer to that shard,
  /// at the next call; a heartbeat is not kept (the next one replaces it). So the call succeeds once the destination is
  /// known.
  std::error_code try_send(peer_id to, message& m) {
    flush(to);
    if (m.header.kind == message_kind::contribution) {
      const auto owner = owner_of(m.header.fragment);
      if (!owner) return make_error_code(errc::unknown_peer);
      deliver(*owner, to, std::move(m));
      return {};
    }
    // The model (layout, state) to every shard but those that run with it
    // already (welcomed us, and did not ask for it since): at the start all
    // of them; later, a shard's new leader that started without it while
    // the others ran on.
    const bool model = m.header.kind == message_kind::layout || m.header.kind == message_kind::state;
    std::vector<std::size_t> to_shards;
    for (std::size_t i = 0; i < shards_.size(); ++i)
      if (!model || !index_[i] || wants_state_[i]) to_shards.push_back(i);
    if (to_shards.empty())
      for (std::size_t i = 0; i < shards_.size(); ++i) to_shards.push_back(i);
    for (std::size_t k = 0; k < to_shards.size(); ++k)
      deliver(to_shards[k], to, k + 1 == to_shards.size() ? std::move(m) : detail::duplicate(m));
    return {};
  }

  /// The next message from any shard (taking them in turn), after checking
  /// a welcome's shard fields and that an update comes from its owner.
  std::optional<envelope> try_receive() {
    flush(syncer_peer);
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const std::size_t i = (next_ + k) % shards_.size();
      while (auto e = shards_[i]->try_receive()) {
        if (!admit(i, *e)) continue;
        next_ = (i + 1) % shards_.size();
        return e;
      }
    }
    return std::nullopt;
  }

  /// How many times any of its connections moved to another syncer
  /// (requirement 5 of `transport`), where its connections say.
  std::uint64_t reconnections() const requires requirements::transport::reconnections<Transport> {
    std::uint64_t n = 0;
    for (const auto* t : shards_) n += t->reconnections();
    return n;
  }

  /// Waits up to `timeout` for a message from any shard. With one shard it
  /// sleeps in that transport; with several it waits on each in turn for at
  /// most `slice` (1 ms), so a message waits at most S ms to be seen.

  std::optional<envelope> receive_for(std::chrono::nanoseconds timeout) requires blocking_transport<Transport> {
    if (auto e = try_receive()) return e;
    if (shards_.size() == 1) {
      auto e = shards_[0]->receive_for(timeout);
      if (e && !admit(0, *e)) return std::nullopt;
      return e;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (std::size_t i = 0; i < shards_.size(); ++i) {
        const auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::nanoseconds::zero()) return std::nullopt;
        if (auto e = shards_[i]->receive_for(std::min<std::chrono::nanoseconds>(left, slice)); e && admit(i, *e))
          return e;
      }
    }
  }

  /// The connection serving fragment p, once its shard has welcomed us.
  std::optional<std::size_t> owner_of(std::uint32_t p) const {
    if (count_ == 0) return std::nullopt;
    for (std::size_t i = 0; i < index_.size(); ++i)
      if (index_[i] && *index_[i] == p % count_) return i;
    return std::nullopt;
  }

  /// What is wrong with the shards' welcomes (`none` while all agree). A
  /// welcome that disagrees is dropped, so the learner does not join and
  /// `learner::step` times out; this says why.
  shard_error error() const noexcept { return error_; }
  /// Updates dropped because they came from a shard that does not own their fragment.
  std::uint64_t misrouted() const noexcept { return misrouted_; }
  /// Messages waiting for connection i, which refused them.
  std::size_t pending(std::size_t i) const noexcept { return pending_[i].size(); }
  /// Messages a connection refused that were kept to retry, and those dropped
  /// (heartbeats, and the oldest beyond `max_pending`).
  std::uint64_t deferred() const noexcept { return deferred_; }
  std::uint64_t dropped() const noexcept { return dropped_; }

  static constexpr std::size_t max_pending = 64;

  std::span<Transport* const> connections() const noexcept { return shards_; }

  static constexpr std::chrono::nanoseconds slice = std::chrono::milliseconds(1);

 private:
  /// Sends `m` to connection i after what waits for it, or queues it there.
  void deliver(std::size_t i, peer_id to, message&& m) {
    if (pending_[i].empty() && !shards_[i]->try_send(to, m)) return;
    if (m.header.kind == message_kind::heartbeat) {
      ++dropped_;
      return;
    }
    ++deferred_;
    pending_[i].push_back(std::move(m));
    for (; pending_[i].size() > max_pending; ++dropped_) pending_[i].pop_front();
  }

  void flush(peer_id to) {
    for (std::size_t i = 0; i < shards_.size(); ++i)
      while (!pending_[i].empty() && !shards_[i]->try_send(to, pending_[i].front())) pending_[i].pop_front();
  }

  /// Learns a shard's index from its welcome (not from a bootstrap's
  /// `state_wanted` one, which precedes sharding); refuses what disagrees.
  bool admit(std::size_t i, const envelope& e) {
    const auto& h = e.msg.header;
    if (e.error != wire_error::none) return true;  // the learner counts and ignores it
    if (h.kind == message_kind::welcome) wants_state_[i] = (h.flags & state_wanted) != 0;
    if (h.kind == message_kind::welcome && !(h.flags & state_wanted)) {
      const std::uint32_t count = h.steps == 0 ? 1 : static_cast<std::uint32_t>(std::min<std::uint64_t>(h.steps, ~0u));
      const std::uint32_t index = h.fragment;
      if (count != (of_ != 0 ? of_ : shards_.size()) || index >= count) {
        error_ = shard_error::count_mismatch;
        return false;
      }
      for (std::size_t j = 0; j < index_.size(); ++j)
        if (j != i && index_[j] == index) {
          error_ = shard_error::index_conflict;
          return false;
        }
      if (index_[i] && *index_[i] != index) {
        error_ = shard_error::index_conflict;
        return false;
      }
      index_[i] = index;
      count_ = count;
      return true;
    }
    if (h.kind == message_kind::update && count_ != 0 && (!index_[i] || h.fragment % count_ != *index_[i])) {
      ++misrouted_;
      return false;
    }
    return true;
  }

  std::vector<Transport*> shards_;
  std::uint32_t of_ = 0;                             ///< the syncer's shards, when `shards_` is some of them (0: all)
  std::vector<std::optional<std::uint32_t>> index_;  ///< the shard each connection's welcome named
  std::uint32_t count_ = 0;                          ///< S, once a welcome has said it
  std::vector<std::deque<message>> pending_;         ///< per connection: what it refused, in order
  std::vector<bool> wants_state_;                    ///< per connection: its last welcome asked for the model
  std::size_t next_ = 0;
  shard_error error_ = shard_error::none;
  std::uint64_t misrouted_ = 0, deferred_ = 0, dropped_ = 0;
};

}  // namespace diloco
