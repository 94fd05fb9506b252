// The memory budget of a network endpoint (`socket_options::memory_bytes` of
// diloco::zeromq and diloco::tcp): what peers can make it hold — the buffers
// of unfinished inbound messages and the payloads queued for sending, all
// peers together — and which unfinished messages give way when that passes
// the budget (docs/protocol.md, "Framing").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

namespace diloco::detail {

/// Bytes one endpoint holds for its peers. Shared with whatever lets go of
/// queued bytes (libzmq's I/O thread), and read by senders on any thread,
/// so every count is atomic; each is exact once the threads that change it
/// are quiet.
struct memory_use {
  std::atomic<std::uint64_t> inbound{0};        ///< buffers of unfinished inbound messages
  std::atomic<std::uint64_t> outbound{0};       ///< bytes queued for sending, not yet written
  std::atomic<std::uint64_t> evicted{0};        ///< unfinished inbound messages refused for the budget
  std::atomic<std::uint64_t> sends_refused{0};  ///< sends refused for the budget (not a peer's own queue limit)

  std::uint64_t held() const noexcept {
    return inbound.load(std::memory_order_relaxed) + outbound.load(std::memory_order_relaxed);
  }
};

/// Whether `bytes` more may be queued for a peer that has `peer_queued`
/// bytes queued, within `limit`: always when it has none (one message, however
/// large, always goes), else when the endpoint then holds at most `limit`.
/// Counts a refusal.
inline bool admit_send(memory_use& use, std::uint64_t limit, std::uint64_t peer_queued, std::uint64_t bytes) noexcept {
  if (peer_queued == 0 || use.held() + bytes <= limit) return true;
  use.sends_refused.fetch_add(1, std::memory_order_relaxed);
  return false;
}

/// Bookkeeping charged to every unfinished message besides its buffer (its
/// entry in the receiver's tables; an estimate), so that messages whose
/// buffers are freed still count.
inline constexpr std::uint64_t unfinished_entry_bytes = 256;

/// The capacity to grow a buffer of `capacity` bytes to, for a payload of
/// `total` bytes of which `needed` must fit: doubled, at least `needed`, at
/// most `total`. Growing so copies each byte at most once on average (the
/// sizes before the last one add up to less than it).
constexpr std::uint64_t grown_capacity(std::uint64_t capacity, std::uint64_t needed, std::uint64_t total) noexcept {
  const std::uint64_t doubled = capacity > total / 2 ? total : 2 * capacity;
  return doubled < needed ? needed : doubled;
}

/// The unfinished inbound messages of one endpoint, each with the bytes it
/// holds, in the order they last advanced (received a part), and their total
/// in `memory_use::inbound`. One thread: the one that receives.
///
/// When the endpoint holds more than `limit`, `evict` lets messages go, the
/// least recently advanced first — a message that stopped arriving (its
/// sender is gone, stuck, or an attacker that announced a large payload and
/// stopped) before one that is arriving — and never the message that
/// advanced last, so that one message always makes progress.
template <class Key>
class unfinished_messages {
 public:
  unfinished_messages(memory_use& use, std::uint64_t limit) : use_(use), limit_(limit) {}
  unfinished_messages(const unfinished_messages&) = delete;
  unfinished_messages& operator=(const unfinished_messages&) = delete;
  ~unfinished_messages() { use_.inbound.fetch_sub(bytes_, std::memory_order_relaxed); }

  /// `key`'s message advanced and now holds `bytes`: it becomes the most
  /// recent.
  void advanced(const Key& key, std::uint64_t bytes) {
    auto [at, fresh] = index_.try_emplace(key);
    if (fresh) {
      at->second = order_.insert(order_.end(), {key, 0});
    } else {
      order_.splice(order_.end(), order_, at->second);
    }
    charge(*at->second, bytes);
  }

  /// `key`'s message is over (complete, refused, or its connection closed).
  void forget(const Key& key) {
    const auto at = index_.find(key);
    if (at == index_.end()) return;
    charge(*at->second, 0);
    order_.erase(at->second);
    index_.erase(at);
  }

  /// While the endpoint holds more than the limit, calls `let_go(key)` on
  /// the least recently advanced messages but `advancing`, oldest first, each
  /// at most once; `let_go` frees what it can and returns the bytes the
  /// message still holds (0: it is gone, and forgotten here). `let_go` must
  /// not call this object.
  template <class LetGo>
  void evict(const Key& advancing, LetGo&& let_go) {
    for (auto it = order_.begin(); it != order_.end() && use_.held() > limit_;) {
      if (it->key == advancing) {
        ++it;
        continue;
      }
      const std::uint64_t left = let_go(it->key);
      charge(*it, left);
      if (left > 0) {
        ++it;
        continue;
      }
      index_.erase(it->key);
      it = order_.erase(it);
    }
  }

  /// The least recently advanced message, if any (its key), for expiry.
  const Key* oldest() const noexcept { return order_.empty() ? nullptr : &order_.front().key; }

  std::size_t size() const noexcept { return order_.size(); }
  /// Bytes the messages hold, all together.
  std::uint64_t bytes() const noexcept { return bytes_; }
  /// Bytes `key`'s message holds (0 if none).
  std::uint64_t bytes_of(const Key& key) const {
    const auto at = index_.find(key);
    return at == index_.end() ? 0 : at->second->bytes;
  }
  std::uint64_t limit() const noexcept { return limit_; }

 private:
  struct entry {
    Key key;
    std::uint64_t bytes;
  };

  void charge(entry& e, std::uint64_t bytes) noexcept {
    if (bytes >= e.bytes) {
      use_.inbound.fetch_add(bytes - e.bytes, std::memory_order_relaxed);
      bytes_ += bytes - e.bytes;
    } else {
      use_.inbound.fetch_sub(e.bytes - bytes, std::memory_order_relaxed);
      bytes_ -= e.bytes - bytes;
    }
    e.bytes = bytes;
  }

  memory_use& use_;
  std::uint64_t limit_;
  std::list<entry> order_;  ///< least recently advanced first
  std::unordered_map<Key, typename std::list<entry>::iterator> index_;
  std::uint64_t bytes_ = 0;
};

}  // namespace diloco::detail
