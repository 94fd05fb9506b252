// The wire format: every field round-trips at the documented offset, and
// every kind of damage is refused for its own reason.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include <diloco/protocol/wire.hpp>

namespace protocol_wire_test {

using namespace diloco;

message_header full_header(message_kind kind) {
  message_header h;
  h.kind = kind;
  h.codec = kind == message_kind::layout  ? codec_id::bytes
            : wire::carries_payload(kind) ? codec_id::f32
                                          : codec_id::none;
  h.status = kind == message_kind::update ? update_status::resync : update_status::merged;
  h.flags = kind == message_kind::contribution ? final_contribution : kind == message_kind::welcome ? state_wanted : 0;
  h.reason = kind == message_kind::reject ? static_cast<std::uint8_t>(reject_reason::duplicate) : 0;
  h.lock_step = 1;
  h.learner = 0x01020304;
  h.incarnation = 7;
  h.fragment = 3;
  h.fragment_count = 4;
  h.sync_period = 50;
  h.overlap = 5;
  h.sequence = 0x1122334455667788ull;
  h.answers = 99;
  h.base_revision = 12;
  h.revision = 13;
  h.tokens = 3200;  // a learner's kinds only: a syncer's carry its epoch there
  h.epoch = 0x0a0b0c0d0e0f1011ull;
  h.steps = 50;
  h.element_count = wire::carries_payload(kind) ? 3 : 269322;
  h.layout = 0xfeedfacecafebeefull;
  h.step_time_ns = 2'000'000;
  h.transfer_ns = 150'000;
  h.hold_ns = -5;
  h.loss = 0.75;  // a heartbeat's only: it takes the bytes of an update's hold_ns
  h.mixing = 0.25;
  return h;
}

std::vector<std::byte> payload_of(std::initializer_list<float> values) {
  std::vector<std::byte> p(values.size() * sizeof(float));
  std::memcpy(p.data(), std::data(values), p.size());
  return p;
}

/// Rewrites the header checksum after a deliberate change, so that the
/// change itself is what the decoder sees.
void reseal(std::array<std::byte, wire::header_size>& frame) {
  const auto crc = crc32c(std::span<const std::byte>(frame.data(), wire::offset::header_crc));
  std::memcpy(frame.data() + wire::offset::header_crc, &crc, 4);
}

constexpr std::uint64_t limit = 1 << 20;

BOOST_AUTO_TEST_SUITE(protocol_wire)

BOOST_AUTO_TEST_CASE(every_kind_round_trips) {
  const auto payload = payload_of({1.5f, -2.0f, 3.25f});
  for (auto kind : {message_kind::join, message_kind::welcome, message_kind::contribution, message_kind::update,
                    message_kind::heartbeat, message_kind::leave, message_kind::ack, message_kind::reject,
                    message_kind::state, message_kind::end}) {
    const auto h = full_header(kind);
    const std::span<const std::byte> p =
        wire::carries_payload(kind) ? std::span<const std::byte>(payload) : std::span<const std::byte>();
    const auto frame = wire::encode_header(h, p);
    const auto d = wire::decode_header(frame, limit);
    BOOST_TEST_REQUIRE(int(d.error) == int(wire_error::none));
    const auto& g = d.header;
    BOOST_TEST(int(g.kind) == int(h.kind));
    BOOST_TEST(int(g.codec) == int(h.codec));
    BOOST_TEST(int(g.status) == int(h.status));
    BOOST_TEST(g.flags == h.flags);
    BOOST_TEST(g.reason == h.reason);
    BOOST_TEST(g.lock_step == h.lock_step);
    BOOST_TEST(g.learner == h.learner);
    BOOST_TEST(g.incarnation == h.incarnation);
    BOOST_TEST(g.fragment == h.fragment);
    BOOST_TEST(g.fragment_count == h.fragment_count);
    BOOST_TEST(g.sync_period == h.sync_period);
    BOOST_TEST(g.overlap == h.overlap);
    BOOST_TEST(g.sequence == h.sequence);
    BOOST_TEST(g.answers == h.answers);
    BOOST_TEST(g.base_revision == h.base_revision);
    BOOST_TEST(g.revision == h.revision);
    const bool syncers = wire::from_syncer(kind);
    BOOST_TEST(g.tokens == (syncers ? 0u : h.tokens));
    BOOST_TEST(g.epoch == (syncers ? h.epoch : 0u));
    BOOST_TEST(g.steps == h.steps);
    BOOST_TEST(g.element_count == h.element_count);
    BOOST_TEST(g.layout == h.layout);
    BOOST_TEST(g.step_time_ns == h.step_time_ns);
    BOOST_TEST(g.transfer_ns == h.transfer_ns);
    const bool heartbeat = kind == message_kind::heartbeat;
    BOOST_TEST(g.hold_ns == (heartbeat ? 0 : h.hold_ns));
    BOOST_TEST(g.loss.has_value() == heartbeat);
    if (heartbeat) BOOST_TEST(*g.loss == 0.75);
    BOOST_TEST(g.mixing == h.mixing);
    BOOST_TEST(d.payload_bytes == p.size());
    BOOST_TEST(int(wire::check_payload(d, p)) == int(wire_error::none));
  }
}

BOOST_AUTO_TEST_CASE(fields_sit_at_the_documented_offsets_in_little_endian) {
  const auto frame = wire::encode_header(full_header(message_kind::heartbeat), {});
  auto byte = [&](std::size_t i) { return std::to_integer<unsigned>(frame[i]); };
  // "DLCO", version 1 as 01 00, kind 5 (heartbeat), codec 0.
  BOOST_TEST(byte(0) == unsigned('D'));
  BOOST_TEST(byte(3) == unsigned('O'));
  BOOST_TEST(byte(4) == 1u);
  BOOST_TEST(byte(5) == 0u);
  BOOST_TEST(byte(6) == 5u);
  BOOST_TEST(byte(7) == 0u);
  // learner 0x01020304 at 12, least significant byte first.
  BOOST_TEST(byte(12) == 0x04u);
  BOOST_TEST(byte(15) == 0x01u);
  // sequence 0x1122334455667788 at 40.
  BOOST_TEST(byte(40) == 0x88u);
  BOOST_TEST(byte(47) == 0x11u);
  // mixing 0.25 at 128: binary64 0x3FD0000000000000.
  BOOST_TEST(byte(134) == 0xD0u);
  BOOST_TEST(byte(135) == 0x3Fu);
  // No payload: its checksum is CRC-32C of nothing, 0.
  for (std::size_t i = 136; i < 140; ++i) BOOST_TEST(byte(i) == 0u);
}

BOOST_AUTO_TEST_CASE(a_heartbeat_carries_its_loss_as_f64_where_an_update_has_hold_ns) {
  auto h = full_header(message_kind::heartbeat);
  auto bytes_at_120 = [](const std::array<std::byte, wire::header_size>& frame) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, frame.data() + 120, 8);
    return bits;
  };
  // 0.6931471805599453 (ln 2) is binary64 0x3FE62E42FEFA39EF.
  h.loss = 0.6931471805599453;
  auto frame = wire::encode_header(h, {});
  BOOST_TEST(bytes_at_120(frame) == 0x3FE62E42FEFA39EFull);
  auto d = wire::decode_header(frame, limit);
  BOOST_TEST_REQUIRE(int(d.error) == int(wire_error::none));
  BOOST_TEST_REQUIRE(d.header.loss.has_value());
  BOOST_TEST(*d.header.loss == 0.6931471805599453);
  // No loss: all-zero bytes, read back as none (what a learner that predates
  // the field sends).
  h.loss.reset();
  frame = wire::encode_header(h, {});
  BOOST_TEST(bytes_at_120(frame) == 0u);
  BOOST_TEST(!wire::decode_header(frame, limit).header.loss.has_value());
  // A loss of exactly 0 is a loss: it travels as −0.0 (0x8000000000000000).
  h.loss = 0.0;
  frame = wire::encode_header(h, {});
  BOOST_TEST(bytes_at_120(frame) == 0x8000000000000000ull);
  d = wire::decode_header(frame, limit);
  BOOST_TEST_REQUIRE(d.header.loss.has_value());
  BOOST_TEST(*d.header.loss == 0.0);
  // A NaN or an infinity is no header error: the heartbeat still counts, the
  // syncer ignores the loss.
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    h.loss = bad;
    d = wire::decode_header(wire::encode_header(h, {}), limit);
    BOOST_TEST_REQUIRE(int(d.error) == int(wire_error::none));
    BOOST_TEST_REQUIRE(d.header.loss.has_value());
    BOOST_TEST((std::isnan(bad) ? std::isnan(*d.header.loss) : *d.header.loss == bad));
  }
  // Other kinds keep hold_ns there and carry no loss.
  auto u = full_header(message_kind::update);
  const auto payload = payload_of({1.0f, 2.0f, 3.0f});
  const auto uf = wire::encode_header(u, payload);
  BOOST_TEST(bytes_at_120(uf) == std::uint64_t(-5));
  BOOST_TEST(!wire::decode_header(uf, limit).header.loss.has_value());
}

BOOST_AUTO_TEST_CASE(a_syncers_epoch_sits_where_a_learners_tokens_do) {
  const auto bytes_at_72 = [](const std::array<std::byte, wire::header_size>& frame) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, frame.data() + 72, 8);
    return bits;
  };
  std::set<message_kind> syncers;
  for (auto kind : {message_kind::join, message_kind::welcome, message_kind::contribution, message_kind::update,
                    message_kind::heartbeat, message_kind::leave, message_kind::ack, message_kind::reject,
                    message_kind::state, message_kind::end}) {
    const auto payload = payload_of({1.0f, 2.0f, 3.0f});
    const auto frame =
        wire::encode_header(full_header(kind), wire::carries_payload(kind) ? std::span<const std::byte>(payload)
                                                                           : std::span<const std::byte>());
    if (bytes_at_72(frame) == 0x0a0b0c0d0e0f1011ull)
      syncers.insert(kind);
    else
      BOOST_TEST(bytes_at_72(frame) == 3200u);
  }
  // The five kinds a syncer sends (docs/protocol.md, "Kinds"), and no other.
  BOOST_TEST((syncers == std::set<message_kind>{message_kind::welcome, message_kind::update, message_kind::ack,
                                                message_kind::reject, message_kind::end}));
}

BOOST_AUTO_TEST_CASE(wrong_lengths_are_truncated) {
  const auto frame = wire::encode_header(full_header(message_kind::join), {});
  for (std::size_t n = 0; n < wire::header_size; ++n)
    BOOST_TEST(int(wire::decode_header(std::span<const std::byte>(frame.data(), n), limit).error) ==
               int(wire_error::truncated));
  std::vector<std::byte> longer(frame.begin(), frame.end());
  longer.push_back(std::byte{0});
  BOOST_TEST(int(wire::decode_header(longer, limit).error) == int(wire_error::truncated));
}

BOOST_AUTO_TEST_CASE(every_single_bit_flip_of_a_header_is_refused) {
  const auto payload = payload_of({1.0f, 2.0f, 3.0f});
  const auto clean = wire::encode_header(full_header(message_kind::contribution), payload);
  for (std::size_t bit = 0; bit < wire::header_size * 8; ++bit) {
    auto frame = clean;
    frame[bit / 8] ^= std::byte(1u << (bit % 8));
    BOOST_TEST(int(wire::decode_header(frame, limit).error) != int(wire_error::none), "bit " << bit);
  }
}

BOOST_AUTO_TEST_CASE(each_kind_of_damage_has_its_own_reason) {
  const auto payload = payload_of({1.0f, 2.0f, 3.0f});
  const auto clean = wire::encode_header(full_header(message_kind::contribution), payload);
  auto refused = [](std::array<std::byte, wire::header_size> frame) { return wire::decode_header(frame, limit).error; };

  auto f = clean;
  f[1] = std::byte{'X'};
  BOOST_TEST(int(refused(f)) == int(wire_error::bad_magic));

  f = clean;
  f[4] = std::byte{2};
  BOOST_TEST(int(refused(f)) == int(wire_error::bad_version));

  f = clean;
  f[wire::offset::tokens] ^= std::byte{1};  // not resealed
  BOOST_TEST(int(refused(f)) == int(wire_error::bad_checksum));

  for (auto [at, value] : {std::pair<std::size_t, unsigned>{wire::offset::kind, 0u},
                           {wire::offset::kind, 7u},
                           {wire::offset::codec, 3u},
                           {wire::offset::codec, 0u},  // a contribution needs a codec
                           {wire::offset::codec, 8u},  // beyond the last codec
                           {wire::offset::status, 2u},
                           {wire::offset::flags, 4u},
                           {wire::offset::status, 1u},  // only an update carries a status
                           {wire::offset::flags, 2u},   // state_wanted belongs to a welcome
                           {wire::offset::lock_step, 2u},
                           {wire::offset::reason, 1u},    // only a reject carries a reason
                           {wire::offset::block, 1u}}) {  // f32 has no blocks
    f = clean;
    f[at] = std::byte(value);
    reseal(f);
    BOOST_TEST(int(refused(f)) == int(wire_error::bad_header), "byte " << at << " = " << value);
  }
  for (double mixing : {std::nan(""), -0.5, 1.0, std::numeric_limits<double>::infinity()}) {
    f = clean;
    std::memcpy(f.data() + wire::offset::mixing, &mixing, 8);
    reseal(f);
    BOOST_TEST(int(refused(f)) == int(wire_error::bad_header), "mixing " << mixing);
  }
  // A reject's reason must be a known code.
  auto rejected = full_header(message_kind::reject);
  rejected.reason = static_cast<std::uint8_t>(reject_reason::stale);
  BOOST_TEST(int(wire::decode_header(wire::encode_header(rejected, {}), limit).header.reason) ==
             int(reject_reason::stale));
  rejected.reason = static_cast<std::uint8_t>(reject_reason_count);
  BOOST_TEST(int(refused(wire::encode_header(rejected, {}))) == int(wire_error::bad_header));

  // A welcome may name the syncer's number codec, not bytes.
  auto welcome = full_header(message_kind::welcome);
  welcome.codec = codec_id::f64;
  BOOST_TEST(int(wire::decode_header(wire::encode_header(welcome, {}), limit).header.codec) == int(codec_id::f64));
  welcome.codec = codec_id::bytes;
  BOOST_TEST(int(refused(wire::encode_header(welcome, {}))) == int(wire_error::bad_header));

  // A join must not name a codec.
  auto join = wire::encode_header(full_header(message_kind::join), {});
  join[wire::offset::codec] = std::byte{1};
  reseal(join);
  BOOST_TEST(int(refused(join)) == int(wire_error::bad_header));

  // 2^18 + 1 floats is one element over a 1 MiB limit; 2^62 would overflow a
  // naive size computation.
  for (std::uint64_t count : {(limit / 4) + 1, std::uint64_t{1} << 62, ~std::uint64_t{0}}) {
    f = clean;
    std::memcpy(f.data() + wire::offset::element_count, &count, 8);
    reseal(f);
    BOOST_TEST(int(refused(f)) == int(wire_error::oversized), "count " << count);
  }
}

BOOST_AUTO_TEST_CASE(compressed_payloads_name_their_codec_and_block) {
  constexpr std::uint64_t limit = 1 << 20;
  // Sizes by hand (docs/protocol.md): 1000 values in blocks of 256 are 3
  // whole blocks and a tail of 232.
  struct expectation {
    codec_id codec;
    std::uint32_t block;
    std::uint64_t bytes;
  };
  for (const auto& [codec, block, bytes] :
       {expectation{codec_id::bf16, 0, 2000}, expectation{codec_id::int8, 256, 3 * (4 + 256) + 4 + 232},
        expectation{codec_id::fp8, 256, 3 * (4 + 256) + 4 + 232},
        expectation{codec_id::int4, 256, 3 * (4 + 128) + 4 + 116},
        expectation{codec_id::int4, 7, 142 * (4 + 4) + 4 + 3}}) {
    for (auto kind : {message_kind::contribution, message_kind::update}) {
      auto h = full_header(kind);
      h.codec = codec;
      h.block = block;
      h.element_count = 1000;
      const auto d = wire::decode_header(wire::encode_header(h, {}), limit);
      BOOST_TEST(int(d.error) == int(wire_error::none));
      BOOST_TEST(int(d.header.codec) == int(codec));
      BOOST_TEST(d.header.block == block);
      BOOST_TEST(d.payload_bytes == bytes, "codec " << int(codec) << " block " << block);
    }
  }
  auto refused = [&](message_header h) { return int(wire::decode_header(wire::encode_header(h, {}), limit).error); };
  auto h = full_header(message_kind::contribution);
  h.codec = codec_id::int8;
  h.block = 0;  // a block-scaled codec needs a block
  BOOST_TEST(refused(h) == int(wire_error::bad_header));
  h.block = max_codec_block + 1;
  BOOST_TEST(refused(h) == int(wire_error::bad_header));
  h.block = max_codec_block;
  BOOST_TEST(refused(h) == int(wire_error::none));
  h.codec = codec_id::bf16;  // not block-scaled: no block
  BOOST_TEST(refused(h) == int(wire_error::bad_header));
  // A model's initial state travels at full precision.
  h = full_header(message_kind::state);
  h.codec = codec_id::bf16;
  BOOST_TEST(refused(h) == int(wire_error::bad_header));
  // A welcome names the codec contributions should use, and its block.
  h = full_header(message_kind::welcome);
  h.codec = codec_id::int4;
  h.block = 128;
  BOOST_TEST(refused(h) == int(wire_error::none));
  h.block = 0;
  BOOST_TEST(refused(h) == int(wire_error::bad_header));
  // One int4 value over the limit (2 values a byte, 4 bytes per block).
  h = full_header(message_kind::contribution);
  h.codec = codec_id::int4;
  h.block = 256;
  // ⌊limit/132⌋ whole blocks, then a tail whose 4 + ⌈t/2⌉ bytes fill the rest exactly.
  h.element_count = (limit / 132) * 256 + 2 * ((limit % 132) - 4);
  BOOST_TEST(refused(h) == int(wire_error::none));
  h.element_count += 1;
  BOOST_TEST(refused(h) == int(wire_error::oversized));
  h.element_count = std::uint64_t{1} << 62;  // would overflow a naive size computation
  BOOST_TEST(refused(h) == int(wire_error::oversized));
}

BOOST_AUTO_TEST_CASE(layouts_round_trip_and_malformed_ones_are_refused) {
  parameter_layout l;
  l.add("embed", 1000, tensor_role::embedding);
  l.add("layer.weight", 64);
  l.add("layer.bias", 8);
  const auto bytes = wire::encode_layout(l);
  // 2 + 5 + 8 + 1, 2 + 12 + 8 + 1, 2 + 10 + 8 + 1 bytes.
  BOOST_TEST(bytes.size() == 16u + 23u + 21u);
  const auto back = wire::decode_layout(bytes, 1 << 20);
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST((*back == l));
  BOOST_TEST(back->fingerprint() == l.fingerprint());

  BOOST_TEST(!wire::decode_layout({}, 1 << 20).has_value());                                        // no tensor
  BOOST_TEST(!wire::decode_layout(std::span(bytes).first(bytes.size() - 1), 1 << 20).has_value());  // truncated
  BOOST_TEST(!wire::decode_layout(bytes, 1000).has_value());                                        // too many elements
  auto zero_size = bytes;
  std::memset(zero_size.data() + 7, 0, 8);  // "embed"'s element count
  BOOST_TEST(!wire::decode_layout(zero_size, 1 << 20).has_value());
  auto bad_role = bytes;
  bad_role[15] = std::byte{2};
  BOOST_TEST(!wire::decode_layout(bad_role, 1 << 20).has_value());
  std::vector<std::byte> twice(bytes.begin(), bytes.begin() + 16);
  twice.insert(twice.end(), bytes.begin(), bytes.begin() + 16);  // "embed" twice
  BOOST_TEST(!wire::decode_layout(twice, 1 << 20).has_value());
}

BOOST_AUTO_TEST_CASE(payload_damage_is_refused) {
  auto payload = payload_of({1.0f, 2.0f, 3.0f});
  const auto d = wire::decode_header(wire::encode_header(full_header(message_kind::contribution), payload), limit);
  BOOST_TEST_REQUIRE(int(d.error) == int(wire_error::none));
  BOOST_TEST(int(wire::check_payload(d, std::span<const std::byte>(payload).first(11))) == int(wire_error::truncated));
  auto longer = payload;
  longer.push_back(std::byte{0});
  BOOST_TEST(int(wire::check_payload(d, longer)) == int(wire_error::truncated));
  for (std::size_t bit = 0; bit < payload.size() * 8; ++bit) {
    auto damaged = payload;
    damaged[bit / 8] ^= std::byte(1u << (bit % 8));
    BOOST_TEST(int(wire::check_payload(d, damaged)) == int(wire_error::bad_checksum));
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace protocol_wire_test
