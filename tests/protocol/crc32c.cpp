// CRC-32C against the published check value and a bit-at-a-time reference.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

#include <diloco/protocol/crc32c.hpp>
#include <diloco/random.hpp>

namespace protocol_crc32c_test {

std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span<const char>(s)); }

/// One bit at a time, straight from the definition: reflected polynomial
/// 0x82F63B78, initial value and final xor 0xFFFFFFFF.
std::uint32_t bitwise(std::span<const std::byte> data) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::byte b : data) {
    crc ^= std::to_integer<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

BOOST_AUTO_TEST_SUITE(protocol_crc32c)

BOOST_AUTO_TEST_CASE(check_value) {
  // RFC 3720 B.4 / the CRC catalogue: CRC-32C("123456789") = 0xE3069283.
  BOOST_TEST(diloco::crc32c(bytes("123456789")) == 0xE3069283u);
  BOOST_TEST(diloco::crc32c({}) == 0u);
  // RFC 3720 B.4: 32 bytes of zeros → 0x8A9136AA, of 0xFF → 0x62A8AB43.
  std::vector<std::byte> zeros(32, std::byte{0}), ones(32, std::byte{0xff});
  BOOST_TEST(diloco::crc32c(zeros) == 0x8A9136AAu);
  BOOST_TEST(diloco::crc32c(ones) == 0x62A8AB43u);
}

BOOST_AUTO_TEST_CASE(matches_the_bitwise_definition_at_every_length_and_alignment) {
  diloco::splitmix64 rng(5);
  // Up to past three blocks of 8192 bytes and a few blocks of 256, where the
  // SSE4.2 path switches between its three-stream loops and one stream.
  std::vector<std::byte> data(3 * 8192 + 3 * 256 + 64 + 16);
  for (auto& b : data) b = std::byte(rng.next() & 0xff);
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t n :
         {0u,   1u,   3u,   7u,    8u,    9u,    15u,    16u,    63u,    64u,           65u,
          767u, 768u, 769u, 1000u, 1543u, 4096u, 24575u, 24576u, 24577u, 24576u + 768u, 24576u + 768u + 63u}) {
      const std::span<const std::byte> s(data.data() + offset, n);
      BOOST_TEST(diloco::crc32c(s) == bitwise(s), "offset " << offset << ", length " << n);
      // The portable table path agrees too, whatever the host chose.
      BOOST_TEST(diloco::crc32c_portable(s) == bitwise(s));
    }
}

BOOST_AUTO_TEST_CASE(continues_across_pieces) {
  const auto all = bytes("the quick brown fox jumps over the lazy dog");
  for (std::size_t cut = 0; cut <= all.size(); ++cut)
    BOOST_TEST(diloco::crc32c(all.subspan(cut), diloco::crc32c(all.first(cut))) == diloco::crc32c(all));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace protocol_crc32c_test
