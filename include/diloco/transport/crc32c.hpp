// CRC-32C (Castagnoli), the checksum of diloco's wire protocol.
//
// Polynomial 0x1EDC6F41 (reflected 0x82F63B78), initial value and final xor
// 0xFFFFFFFF, as in iSCSI (RFC 3720, appendix B.4) and SSE4.2's `crc32`
// instruction; the check value of "123456789" is 0xE3069283. On x86-64 with
// SSE4.2 it runs on the instruction (8 bytes per step), elsewhere on a table
// (slicing by 8).
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

#if defined(DILOCO_CRC32C_X86)
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_sse42(std::uint32_t crc, const unsigned char* p,
                                                                           std::size_t n) noexcept {
  std::uint64_t c = crc;
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

}  // namespace diloco
