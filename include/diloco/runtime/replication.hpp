// The replication stream of a syncer shard: what a primary sends its standby
// so that the standby holds, at every acknowledgement, what the primary's
// disk holds — the newest checkpoint and the journal written since — and can
// take over with nothing acknowledged lost (docs/protocol.md, "Replication").
//
// This file is the standby's side of it, independent of any transport:
// `replica` checks a standby's records (`replication_record`,
// protocol/replication.hpp) and writes them to its own `checkpoint_store`
// and `contribution_journal`. A standby that becomes the leader restarts
// from that directory exactly as a restarted syncer does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "diloco/error.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/replication.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/checkpoint.hpp"
#include "diloco/runtime/journal.hpp"
#include "diloco/runtime/syncer/checkpoint.hpp"

namespace diloco {

/// A standby's copy of its primary's disk: the records of one leadership
/// (epoch), checked and written to the standby's own checkpoint store and
/// journal — the same files a syncer restarts from. After `follow(epoch)`
/// it takes a snapshot first, then only the records that follow it in
/// sequence; anything else is refused and changes nothing, and the standby
/// should follow again (its primary then sends a fresh snapshot). Not
/// thread-safe.
class replica {
 public:
  /// `max_payload_bytes` bounds a journaled contribution's payload.
  replica(checkpoint_store& store, contribution_journal& journal, std::uint64_t max_payload_bytes)
      : store_(store), journal_(journal), max_payload_bytes_(max_payload_bytes) {}

  /// Starts taking the records of leadership `epoch` (a snapshot first).
  void follow(std::uint64_t epoch) noexcept {
    epoch_ = epoch;
    next_.reset();
  }

  std::uint64_t epoch() const noexcept { return epoch_; }
  /// Whether a snapshot of the current leadership has been written.
  bool ready() const noexcept { return next_.has_value(); }
  /// The sequence of the last record written.
  std::uint64_t written() const noexcept { return next_ ? *next_ - 1 : 0; }
  std::uint64_t snapshots() const noexcept { return snapshots_; }
  std::uint64_t journaled() const noexcept { return journaled_; }

  /// Writes a snapshot or journal record and returns its sequence to
  /// acknowledge. Throws `corrupt_state`, writing nothing, for a record of
  /// another epoch or kind, a journal record before a snapshot or out of
  /// sequence, a snapshot whose body is not a checkpoint body, or a journal
  /// body that is not one intact contribution; `std::system_error` on an
  /// I/O error.
  /// A record read in place (`replication_record::decode_view`, which
  /// checked the body's CRC) or a whole one: a journal record is appended as
  /// it came.
  std::uint64_t apply(const replication_record::view& r) {
    if (r.epoch != epoch_)
      refuse("of epoch " + std::to_string(r.epoch) + " while following epoch " + std::to_string(epoch_));
    if (r.kind == replication_kind::snapshot) {
      if (next_ && r.sequence != *next_) refuse("snapshot out of sequence");
      (void)read_checkpoint_body(r.body);  // throws corrupt_state for a body that is not one
      store_.write(r.body);
      journal_.clear();
      ++snapshots_;
    } else if (r.kind == replication_kind::journal) {
      if (!next_) refuse("journal record before a snapshot");
      if (r.sequence != *next_)
        refuse("journal record " + std::to_string(r.sequence) + " where " + std::to_string(*next_) + " was due");
      check_contribution(r.body);
      journal_.append_encoded(std::as_bytes(std::span<const char>(r.body.data(), r.body.size())));
      ++journaled_;
    } else {
      refuse("of a kind a primary does not send here");
    }
    next_ = r.sequence + 1;
    return r.sequence;
  }

 private:
  /// Refuses a journal body that is not one contribution: its header (with
  /// its own CRC) decoded, the payload of the length it announces (whose
  /// bytes the record's body CRC covers; a restart checks its CRC again).
  void check_contribution(std::string_view body) const {
    const auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(body.data()), body.size());
    if (bytes.size() < wire::header_size) refuse("journal body shorter than a header");
    const auto d = wire::decode_header(bytes.first<wire::header_size>(), max_payload_bytes_);
    if (d.error != wire_error::none || d.payload_bytes != bytes.size() - wire::header_size)
      refuse("journal body is not one message");
    if (d.header.kind != message_kind::contribution) refuse("journal body is not a contribution");
  }
  [[noreturn]] static void refuse(const std::string& why) {
    throw corrupt_state("diloco: replica refused a record " + why);
  }

  checkpoint_store& store_;
  contribution_journal& journal_;
  std::uint64_t max_payload_bytes_;
  std::uint64_t epoch_ = 0;
  std::optional<std::uint64_t> next_;
  std::uint64_t snapshots_ = 0, journaled_ = 0;
};

}  // namespace diloco
