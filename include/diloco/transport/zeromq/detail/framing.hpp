// diloco::zeromq's framing (docs/protocol.md, "Framing"): a message is a
// header frame and a payload frame; a payload larger than a chunk goes as
// that first message with its first chunk, then one continuation message per
// further chunk. Payloads are lent to libzmq without a copy, counted in bytes
// until libzmq lets go of them, and received into pooled buffers reused from
// message to message, checksummed on the way.
//
// Why chunks: libzmq allocates every received frame with `malloc`. A 64 MiB
// frame is a fresh mapping whose 16 384 pages all fault while the kernel
// fills it (0.27 GB/s here against 3 GB/s for a raw socket), and even a
// 16 MiB one is read back from memory, long out of cache, when it is copied
// out. Frames of 1 MiB are served from malloc's free lists, and each is
// copied into the reassembled payload while the kernel's write is still in
// cache, one chunk behind the socket.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace diloco::zeromq::detail {

// --- continuation frames ------------------------------------------------------

/// The first frame of a continuation message: magic "DLCC", u32 index (1 for
/// the second part of a payload, 2 for the third, ...), u64 offset of the
/// part's first byte in the payload; little-endian.
inline constexpr std::size_t continuation_size = 16;
inline constexpr std::array<std::byte, 4> continuation_magic{std::byte{'D'}, std::byte{'L'}, std::byte{'C'},
                                                             std::byte{'C'}};

struct continuation {
  std::uint32_t index = 0;
  std::uint64_t offset = 0;
};

inline std::array<std::byte, continuation_size> encode_continuation(continuation c) noexcept {
  std::array<std::byte, continuation_size> out{};
  std::memcpy(out.data(), continuation_magic.data(), 4);
  std::memcpy(out.data() + 4, &c.index, 4);
  std::memcpy(out.data() + 8, &c.offset, 8);
  return out;
}

/// The continuation a frame announces, or nothing if it is not one.
inline std::optional<continuation> decode_continuation(std::span<const std::byte> frame) noexcept {
  if (frame.size() != continuation_size || std::memcmp(frame.data(), continuation_magic.data(), 4) != 0)
    return std::nullopt;
  continuation c;
  std::memcpy(&c.index, frame.data() + 4, 4);
  std::memcpy(&c.offset, frame.data() + 8, 8);
  return c;
}

}  // namespace diloco::zeromq::detail
