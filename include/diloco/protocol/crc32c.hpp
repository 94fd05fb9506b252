// CRC-32C (Castagnoli), the checksum of diloco's wire protocol.
//
// Polynomial 0x1EDC6F41 (reflected 0x82F63B78), initial value and final xor
// 0xFFFFFFFF, as in iSCSI (RFC 3720, appendix B.4) and SSE4.2's `crc32`
// instruction; the check value of "123456789" is 0xE3069283. On x86-64 with
// SSE4.2 it runs on the instruction, three independent streams at a time
// (~2.8x one stream: the instruction's latency is 3 cycles, its throughput one
// per cycle), elsewhere on a table (slicing by 8).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define DILOCO_CRC32C_X86 1
#endif

namespace diloco {

namespace detail {

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;

consteval std::array<std::array<std::uint32_t, 256>, 8> crc32c_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? crc32c_polynomial : 0u);
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

inline constexpr auto crc32c_table = crc32c_tables();

/// The raw (not pre- or post-inverted) CRC update, portable.
inline std::uint32_t crc32c_update_portable(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  const auto& t = crc32c_table;
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= crc;  // little-endian: the low 4 bytes meet the CRC
    crc = t[7][word & 0xff] ^ t[6][(word >> 8) & 0xff] ^ t[5][(word >> 16) & 0xff] ^ t[4][(word >> 24) & 0xff] ^
          t[3][(word >> 32) & 0xff] ^ t[2][(word >> 40) & 0xff] ^ t[1][(word >> 48) & 0xff] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return crc;
}

/// The CRC register after `bytes` zero bytes, as a table per byte of the
/// register (the update is linear over GF(2): four lookups shift any state).
consteval std::array<std::array<std::uint32_t, 256>, 4> crc32c_zeros_table(std::size_t bytes) {
  // 32x32 GF(2) matrices as 32 columns: `op[j]` is the image of bit j.
  using matrix = std::array<std::uint32_t, 32>;
  auto apply = [](const matrix& m, std::uint32_t v) {
    std::uint32_t r = 0;
    for (int j = 0; v; ++j, v >>= 1)
      if (v & 1u) r ^= m[j];
    return r;
  };
  matrix op{};  // one zero byte
  for (int j = 0; j < 32; ++j) {
    std::uint32_t c = std::uint32_t{1} << j;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? crc32c_polynomial : 0u);
    op[j] = c;
  }
  matrix result{};
  for (int j = 0; j < 32; ++j) result[j] = std::uint32_t{1} << j;
  for (std::size_t n = bytes; n; n >>= 1) {  // result = op^bytes by squaring
    if (n & 1) {
      matrix next{};
      for (int j = 0; j < 32; ++j) next[j] = apply(op, result[j]);
      result = next;
    }
    matrix square{};
    for (int j = 0; j < 32; ++j) square[j] = apply(op, op[j]);
    op = square;
  }
  std::array<std::array<std::uint32_t, 256>, 4> t{};
  for (int k = 0; k < 4; ++k)
    for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = apply(result, b << (8 * k));
  return t;
}

inline constexpr std::size_t crc32c_long_block = 8192, crc32c_short_block = 256;
inline constexpr auto crc32c_long_shift = crc32c_zeros_table(crc32c_long_block);
inline constexpr auto crc32c_short_shift = crc32c_zeros_table(crc32c_short_block);

inline std::uint32_t crc32c_shift(const std::array<std::array<std::uint32_t, 256>, 4>& t, std::uint32_t c) noexcept {
  return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

#if defined(DILOCO_CRC32C_X86)
/// Three independent streams over consecutive blocks of `block` bytes keep
/// the `crc32` instruction busy (latency 3, throughput 1 per cycle); the
/// three registers are then combined with the zeros table of `block` bytes
/// (the method of Mark Adler's crc32c.c). Advances `p` and `n`.
__attribute__((target("sse4.2"))) inline std::uint64_t crc32c_streams_sse42(
    std::uint64_t c, const unsigned char*& p, std::size_t& n, std::size_t block,
    const std::array<std::array<std::uint32_t, 256>, 4>& shift) noexcept {
  while (n >= 3 * block) {
    std::uint64_t c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < block; i += 8) {
      std::uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + block + i, 8);
      std::memcpy(&w2, p + 2 * block + i, 8);
      c = _mm_crc32_u64(c, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = crc32c_shift(shift, static_cast<std::uint32_t>(c)) ^ c1;
    c = crc32c_shift(shift, static_cast<std::uint32_t>(c)) ^ c2;
    p += 3 * block;
    n -= 3 * block;
  }
  return c;
}

__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_sse42(std::uint32_t crc, const unsigned char* p,
                                                                           std::size_t n) noexcept {
  std::uint64_t c = crc;
  c = crc32c_streams_sse42(c, p, n, crc32c_long_block, crc32c_long_shift);
  c = crc32c_streams_sse42(c, p, n, crc32c_short_block, crc32c_short_shift);
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

inline bool has_sse42() noexcept {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace detail

/// CRC-32C of `data`, continuing from `previous` (the CRC of what came before;
/// 0 to start).
inline std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t previous = 0) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::uint32_t crc = ~previous;
#if defined(DILOCO_CRC32C_X86)
  if (detail::has_sse42()) return ~detail::crc32c_update_sse42(crc, p, data.size());
#endif
  return ~detail::crc32c_update_portable(crc, p, data.size());
}

/// CRC-32C of `data` on the table (slicing by 8) whatever the host: what
/// `crc32c` computes where SSE4.2 is missing, and a second implementation to
/// hold its result against. Slower than `crc32c` where SSE4.2 is present.
inline std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t previous = 0) noexcept {
  return ~detail::crc32c_update_portable(~previous, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

}  // namespace diloco
