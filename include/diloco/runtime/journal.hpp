// The contribution journal: every contribution the syncer accepts is appended
// before its acknowledgement leaves, so that what the syncer acknowledged
// survives a crash between two checkpoints (docs/design.md, "Nothing
// acknowledged is lost").
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/checkpoint.hpp"

namespace diloco {

/// What `contribution_journal::read` found in a journal file.
struct journal_contents {
  std::vector<message> messages;  ///< the intact records, in the order they were appended
  std::uint64_t torn_bytes = 0;   ///< bytes after the last intact record (a write the crash cut short)
};

/// An append-only file of accepted contributions, each stored as it travels:
/// the 144-byte wire header (with its CRC-32C and the payload's) followed by
/// the payload (docs/protocol.md). Used with a `checkpoint_store`:
///
/// - `syncer_options::before_ack` appends each accepted contribution;
/// - after each checkpoint is durable, `clear` empties the journal (the
///   checkpoint holds everything it had: merged, or in an open round);
/// - on restart, after `syncer::load` of the newest checkpoint, every
///   record of `read` goes to `syncer::replay`, which takes each exactly
///   once (a record the checkpoint already holds is recognized by its
///   idempotency key).
///
/// A record is complete before the acknowledgement is sent, so a crash can
/// only tear a record nobody was told about; `read` stops there. `append`
/// returns once the bytes are in the kernel: they survive the death of the
/// process (SIGKILL included). With `sync_each = true` it also waits for the
/// disk (`fdatasync`), so that they survive the machine — at the cost of one
/// disk flush per contribution. Not thread-safe; one writer per file.
class contribution_journal {
 public:
  /// Opens (creating if needed) the journal at `path` for appending.
  /// Throws `std::system_error` naming the file if it cannot.
  explicit contribution_journal(std::filesystem::path path, bool sync_each = false)
      : path_(std::move(path)), sync_each_(sync_each) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open");
  }
  contribution_journal(const contribution_journal&) = delete;
  contribution_journal& operator=(const contribution_journal&) = delete;
  ~contribution_journal() {
    if (fd_ >= 0) ::close(fd_);
  }

  const std::filesystem::path& path() const noexcept { return path_; }

  /// Appends `m` (header and payload). Throws `std::system_error` on an I/O
  /// error: the caller must then not acknowledge `m`.
  void append(const message& m) {
    const std::span<const std::byte> payload = m.payload.bytes();
    const auto header = wire::encode_header(m.header, payload);
    const auto as_view = [](std::span<const std::byte> b) {
      return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
    };
    if (!detail::write_all(fd_, as_view(header)) || !detail::write_all(fd_, as_view(payload))) fail("cannot append to");
    if (sync_each_ && ::fdatasync(fd_) != 0) fail("cannot sync");
    ++appended_;
  }

  /// Appends a record already encoded as `append` would write it (a
  /// standby's copy of its primary's journal, `replica`): the caller checked
  /// it. Throws `std::system_error` on an I/O error.
  void append_encoded(std::span<const std::byte> record) {
    if (!detail::write_all(fd_, std::string_view(reinterpret_cast<const char*>(record.data()), record.size())))
      fail("cannot append to");
    if (sync_each_ && ::fdatasync(fd_) != 0) fail("cannot sync");
    ++appended_;
  }

  /// Empties the journal: call it once a checkpoint holding everything it
  /// recorded is durable.
  void clear() {
    if (::ftruncate(fd_, 0) != 0) fail("cannot truncate");
    if (sync_each_ && ::fdatasync(fd_) != 0) fail("cannot sync");
  }

  /// Records appended through this object.
  std::uint64_t appended() const noexcept { return appended_; }

  /// The intact records of the journal at `path` (none if it does not
  /// exist). Reading stops at the first record that is cut short or fails
  /// its checks (magic, version, header or payload CRC, a payload over
  /// `max_payload_bytes`); what follows counts as torn. Throws
  /// `std::system_error` if the file exists but cannot be read.
  static journal_contents read(const std::filesystem::path& path, std::uint64_t max_payload_bytes) {
    journal_contents out;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) {
      if (errno == ENOENT) return out;
      throw std::system_error(errno, std::generic_category(),
                              "diloco::contribution_journal: cannot read " + path.string());
    }
    std::vector<std::byte> data;
    std::byte chunk[1 << 16];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) data.insert(data.end(), chunk, chunk + n);
    std::fclose(f);
    std::span<const std::byte> rest(data);
    while (rest.size() >= wire::header_size) {
      const auto d = wire::decode_header(rest.first<wire::header_size>(), max_payload_bytes);
      if (d.error != wire_error::none || rest.size() - wire::header_size < d.payload_bytes) break;
      const auto payload = rest.subspan(wire::header_size, static_cast<std::size_t>(d.payload_bytes));
      if (wire::check_payload(d, payload) != wire_error::none) break;
      message m;
      m.header = d.header;
      m.payload = byte_buffer(payload.size());
      std::memcpy(m.payload.data(), payload.data(), payload.size());
      out.messages.push_back(std::move(m));
      rest = rest.subspan(wire::header_size + payload.size());
    }
    out.torn_bytes = rest.size();
    return out;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::system_error(errno, std::generic_category(),
                            std::string("diloco::contribution_journal: ") + what + " " + path_.string());
  }

  std::filesystem::path path_;
  bool sync_each_;
  int fd_ = -1;
  std::uint64_t appended_ = 0;
};

}  // namespace diloco
