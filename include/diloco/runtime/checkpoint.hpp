// Durable checkpoints in a directory: each written atomically (a temporary
// file, fsync, rename, fsync of the directory) and checksummed, so that a
// crash at any moment leaves the previous checkpoint readable and a torn or
// corrupt file is detected and skipped.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/protocol/crc32c.hpp"

namespace diloco {

namespace detail {

/// Writes all of `data` to `fd` (retrying short writes and EINTR); false on
/// an I/O error, with `errno` set.
inline bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace detail

/// A directory of numbered checkpoints, `checkpoint-<sequence>.bin`.
///
/// File format (little-endian): `DLCK`, u32 version 1, u64 sequence, u64
/// body length, u32 CRC-32C of the body, the body. `write` makes a new one
/// durable before it returns and keeps the newest `keep` files; `latest`
/// returns the newest one whose header and checksum are intact, skipping
/// (and reporting) the others. Not thread-safe; one writer per directory.
class checkpoint_store {
 public:
  /// Creates the directory if needed. Throws `std::system_error` if it cannot.
  explicit checkpoint_store(std::filesystem::path directory, std::size_t keep = 2)
      : directory_(std::move(directory)), keep_(std::max<std::size_t>(keep, 1)) {
    std::filesystem::create_directories(directory_);
    for (const auto& f : files()) next_ = std::max(next_, f.first + 1);
  }

  const std::filesystem::path& directory() const noexcept { return directory_; }

  /// Writes `body` as the next checkpoint and returns its sequence number;
  /// on return it survives a crash of the process or the machine. Throws
  /// `std::system_error` on an I/O error (the previous checkpoints stay).
  std::uint64_t write(std::string_view body) {
    const std::uint64_t sequence = next_++;
    const auto final_path = directory_ / name(sequence);
    const auto temporary = directory_ / (name(sequence) + ".tmp");
    std::string header;
    header.append("DLCK", 4);
    append<std::uint32_t>(header, 1);
    append<std::uint64_t>(header, sequence);
    append<std::uint64_t>(header, body.size());
    append<std::uint32_t>(header, crc32c(std::as_bytes(std::span<const char>(body.data(), body.size()))));

    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) fail("cannot create " + temporary.string());
    const bool ok = detail::write_all(fd, header) && detail::write_all(fd, body) && ::fsync(fd) == 0;
    const int saved_errno = errno;
    ::close(fd);
    if (!ok) {
      std::filesystem::remove(temporary);
      errno = saved_errno;
      fail("cannot write " + temporary.string());
    }
    std::filesystem::rename(temporary, final_path);
    sync_directory();
    prune();
    return sequence;
  }

  /// A checkpoint read back.
  struct checkpoint {
    std::uint64_t sequence = 0;
    std::string body;
  };

  /// The newest intact checkpoint, or nothing. `skipped` receives a line for
  /// every newer file that was torn or corrupt.
  std::optional<checkpoint> latest(std::vector<std::string>* skipped = nullptr) const {
    auto newest = intact(1, skipped);
    if (newest.empty()) return std::nullopt;
    return std::move(newest.front());
  }

  /// The newest `count` intact checkpoints, newest first (the store keeps
  /// `keep` files). `skipped` receives a line for every file newer than the
  /// last one returned that was torn or corrupt.
  std::vector<checkpoint> intact(std::size_t count, std::vector<std::string>* skipped = nullptr) const {
    auto all = files();
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<checkpoint> out;
    for (const auto& [sequence, path] : all) {
      if (out.size() == count) break;
      std::string why;
      if (auto c = read(path, sequence, why))
        out.push_back(std::move(*c));
      else if (skipped)
        skipped->push_back(path.filename().string() + ": " + why);
    }
    return out;
  }

 private:
  static std::string name(std::uint64_t sequence) {
    char b[48];
    std::snprintf(b, sizeof b, "checkpoint-%020llu.bin", static_cast<unsigned long long>(sequence));
    return b;
  }

  template <class U>
  static void append(std::string& s, U value) {
    s.append(reinterpret_cast<const char*>(&value), sizeof(U));
  }

  [[noreturn]] static void fail(const std::string& what) {
    throw std::system_error(errno, std::generic_category(), "diloco::checkpoint_store: " + what);
  }

  void sync_directory() const {
    const int fd = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("cannot open " + directory_.string());
    const bool ok = ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) fail("cannot sync " + directory_.string());
  }

  /// (sequence, path) of every checkpoint file, in no particular order.
  std::vector<std::pair<std::uint64_t, std::filesystem::path>> files() const {
    std::vector<std::pair<std::uint64_t, std::filesystem::path>> out;
    for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
      const auto file = entry.path().filename().string();
      if (file.size() != 35 || file.rfind("checkpoint-", 0) != 0 || file.substr(31) != ".bin") continue;
      const auto digits = file.substr(11, 20);
      if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
      out.emplace_back(std::stoull(digits), entry.path());
    }
    return out;
  }

  void prune() const {
    auto all = files();
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t i = keep_; i < all.size(); ++i) std::filesystem::remove(all[i].second);
  }

  static std::optional<checkpoint> read(const std::filesystem::path& path, std::uint64_t expected, std::string& why) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return why = std::strerror(errno), std::nullopt;
    std::string data;
    char buffer[1 << 16];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) data.append(buffer, n);
    std::fclose(f);
    constexpr std::size_t header = 4 + 4 + 8 + 8 + 4;
    if (data.size() < header) return why = "shorter than its header (torn)", std::nullopt;
    auto field = [&](std::size_t at, auto value) {
      std::memcpy(&value, data.data() + at, sizeof value);
      return value;
    };
    if (data.compare(0, 4, "DLCK") != 0) return why = "not a diloco checkpoint", std::nullopt;
    if (field(4, std::uint32_t{}) != 1) return why = "unsupported version", std::nullopt;
    if (field(8, std::uint64_t{}) != expected) return why = "sequence does not match its name", std::nullopt;
    const auto length = field(16, std::uint64_t{});
    if (length != data.size() - header) return why = "body length does not match (torn)", std::nullopt;
    const std::string_view body(data.data() + header, length);
    if (field(24, std::uint32_t{}) != crc32c(std::as_bytes(std::span<const char>(body.data(), body.size()))))
      return why = "checksum mismatch (corrupt)", std::nullopt;
    return checkpoint{expected, std::string(body)};
  }

  std::filesystem::path directory_;
  std::size_t keep_;
  std::uint64_t next_ = 1;
};

}  // namespace diloco
