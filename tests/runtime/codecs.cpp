// Compressed fragments end to end in the runtime: the welcome names the codec,
// the learner encodes its outer gradient in it (with error feedback when
// asked), the syncer checks and decodes it, and updates travel in the update
// codec. Expected values are computed here from the formulas of
// docs/protocol.md ("Codecs"), not with the codec's own code.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/syncer_fixture.hpp"

namespace runtime_codecs_test {

using namespace std::chrono_literals;
using namespace diloco;
using syncer_test::fixture;
using syncer_test::test_syncer;

/// int8 of x in a block whose largest magnitude is a, decoded:
/// round(x/a · 127), halves away from zero, times a/127.
double int8_value(double x, double a) { return std::round(x / a * 127.0) / 127.0 * a; }
/// int4 likewise, with 7 levels a side.
double int4_value(double x, double a) { return std::round(x / a * 7.0) / 7.0 * a; }

/// The bytes of one int8 block: the f32 scale, then the codes.
std::vector<std::byte> int8_block(float absmax, std::vector<std::int8_t> codes) {
  std::vector<std::byte> b(4 + codes.size());
  std::memcpy(b.data(), &absmax, 4);
  std::memcpy(b.data() + 4, codes.data(), codes.size());
  return b;
}

message with_payload(message m, codec_id codec, std::uint32_t block, const std::vector<std::byte>& bytes) {
  m.header.codec = codec;
  m.header.block = block;
  m.payload = byte_buffer(bytes.size());
  std::memcpy(m.payload.data(), bytes.data(), bytes.size());
  return m;
}

syncer_options with_codecs(codec_id contributions, codec_id updates, std::uint32_t block) {
  auto o = fixture::options();
  o.training.codecs = {.contributions = contributions, .updates = updates, .block = block};
  return o;
}

/// A float model whose gradient is fixed per parameter; inner SGD at 0.5.
struct fixed_gradient_model {
  using scalar_type = float;
  using batch_type = int;
  parameter_layout layout_;
  std::vector<float> params = std::vector<float>(8, 0.0f);
  std::vector<float> grads{1.0f, 0.3f, 0.2f, 0.05f, 1.0f, 0.5f, 0.01f, -0.7f};

  fixed_gradient_model() { layout_.add("w", 8); }
  const parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return params; }
  std::span<const float> gradients() const { return grads; }
  step_stats compute_gradients(const int&) { return {0.0, 1}; }
};

using float_learner = learner<fixed_gradient_model, inner::sgd<float>, inproc::endpoint>;

/// A learner driven by hand, the test playing the syncer: one fragment of 8
/// values, H = 2, contributions in `codec` with blocks of 4.
struct learner_fixture {
  inproc::hub hub;
  inproc::endpoint& syncer_end = hub.attach(syncer_peer);
  inproc::endpoint& learner_end = hub.attach(0);
  fixed_gradient_model model;
  float_learner l;
  time_point now{};

  explicit learner_fixture(bool error_feedback)
      : l(model, learner_end, learner_options{.id = 0, .error_feedback = error_feedback},
          inner::sgd<float>({.learning_rate = 0.5})) {}

  std::vector<message> received() {
    std::vector<message> got;
    while (auto e = syncer_end.try_receive()) got.push_back(std::move(e->msg));
    return got;
  }

  void join(codec_id codec, std::uint32_t block) {
    BOOST_TEST(!l.poll(now));
    received();
    message w;
    w.header.kind = message_kind::welcome;
    w.header.codec = codec;
    w.header.block = block;
    w.header.learner = 0;
    w.header.incarnation = 1;
    w.header.layout = model.layout().fingerprint();
    w.header.element_count = 8;
    w.header.fragment_count = 1;
    w.header.sync_period = 2;
    BOOST_TEST_REQUIRE(!syncer_end.try_send(0, w));
    BOOST_TEST(!l.poll(now));
    adopt_f32(0, std::vector<float>(8, 0.0f));
    BOOST_TEST_REQUIRE(l.poll(now));
  }

  void adopt_f32(std::uint64_t revision, const std::vector<float>& values) {
    message u;
    u.header.kind = message_kind::update;
    u.header.codec = codec_id::f32;
    u.header.learner = 0;
    u.header.incarnation = 1;
    u.header.revision = revision;
    u.header.status = update_status::resync;
    u.header.element_count = values.size();
    u.payload = byte_buffer(values.size() * 4);
    std::memcpy(u.payload.data(), values.data(), u.payload.size());
    BOOST_TEST_REQUIRE(!syncer_end.try_send(0, u));
  }

  /// H = 2 inner steps; returns the contribution they sent.
  message period() {
    for (int i = 0; i < 2; ++i) {
      BOOST_TEST_REQUIRE(l.poll(now));
      l.train_step(0, now);
      now += 1s;
    }
    std::vector<message> sent;
    for (auto& m : received())
      if (m.header.kind == message_kind::contribution) sent.push_back(std::move(m));
    BOOST_TEST_REQUIRE(sent.size() == 1u);
    return std::move(sent[0]);
  }
};

/// The int4 payload of 8 values in blocks of 4, decoded by the layout of
/// docs/protocol.md: per block an f32 absmax and two codes a byte, low nibble first.
std::vector<double> read_int4(const message& m) {
  BOOST_TEST_REQUIRE(m.payload.size() == 2u * (4 + 2));
  std::vector<double> out;
  const std::byte* p = m.payload.data();
  for (int b = 0; b < 2; ++b, p += 6) {
    float absmax;
    std::memcpy(&absmax, p, 4);
    for (int i = 0; i < 4; ++i) {
      int q = (std::to_integer<int>(p[4 + i / 2]) >> (4 * (i % 2))) & 0xF;
      if (q >= 8) q -= 16;
      out.push_back(q / 7.0 * absmax);
    }
  }
  return out;
}

BOOST_AUTO_TEST_SUITE(runtime_codecs)

BOOST_FIXTURE_TEST_CASE(a_codec_a_float_model_cannot_travel_in_is_refused_by_name, fixture) {
  for (const codec_id c : {codec_id::none, codec_id::f64, codec_id::bytes}) {
    for (const bool contributions : {true, false}) {
      const auto o = contributions ? with_codecs(c, codec_id::f32, 4) : with_codecs(codec_id::f32, c, 4);
      const std::string field = contributions ? "contributions" : "updates";
      try {
        test_syncer s(layout, initial, syncer_end, o);
        BOOST_ERROR(field << " = " << codec::name(c) << " was accepted");
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find(field + " = " + std::string(codec::name(c))) != std::string::npos, what);
      }
    }
  }
}

BOOST_FIXTURE_TEST_CASE(the_welcome_names_the_codec_and_an_int8_outer_gradient_is_merged_decoded, fixture) {
  test_syncer s(layout, initial, syncer_end, with_codecs(codec_id::int8, codec_id::f32, 4));
  send(0, join(0));
  deliver(s);
  const auto got = inbox(0);
  BOOST_TEST_REQUIRE(got.size() == 2u);
  BOOST_TEST(int(got[0].header.kind) == int(message_kind::welcome));
  BOOST_TEST(int(got[0].header.codec) == int(codec_id::int8));
  BOOST_TEST(got[0].header.block == 4u);
  BOOST_TEST(int(got[1].header.codec) == int(codec_id::f64));  // updates at full precision

  // Δ = (0.5, −1, 0.25, 2 | 0.1, −0.3) in blocks of 4: scales 2 and 0.3.
  const std::vector<double> delta{0.5, -1.0, 0.25, 2.0, 0.1, -0.3};
  auto bytes = int8_block(2.0f, {32, -64, 16, 127});  // round(x/2·127): 31.75, −63.5 (away from 0), 15.875
  const auto tail = int8_block(0.3f, {42, -127});     // round(0.1/0.3·127) = round(42.33)
  bytes.insert(bytes.end(), tail.begin(), tail.end());
  send(0, with_payload(contribution(0, delta), codec_id::int8, 4, bytes));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.metrics().payload_bytes_received == 14u);  // (4 + 4) + (4 + 2)
  const auto global = s.parameters();
  for (std::size_t i = 0; i < 6; ++i) {
    const double a = i < 4 ? 2.0 : 0.3;
    // Outer SGD at η = 1 over one contribution: Θ ← Θ − decode(Δ).
    BOOST_TEST(global[i] == initial[i] - int8_value(delta[i], a), boost::test_tools::tolerance(1e-6));
  }
}

BOOST_FIXTURE_TEST_CASE(malformed_compressed_outer_gradients_are_refused_and_change_nothing, fixture) {
  auto o = with_codecs(codec_id::int8, codec_id::f32, 4);
  o.screening.quarantine_after = 0;  // every refusal here counts against learner 0: keep it in
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  auto good = int8_block(1.0f, {1, 2, 3, 4});
  const auto tail = int8_block(1.0f, {5, 6});
  good.insert(good.end(), tail.begin(), tail.end());
  std::uint64_t sequence = 10;
  auto refused = [&](codec_id codec, std::uint32_t block, std::vector<std::byte> bytes, reject_reason why) {
    const auto before = s.metrics().rejected_for(why);
    send(0, with_payload(contribution(0, std::vector<double>(6, 0.0), 0, 1, ++sequence), codec, block, bytes));
    deliver(s);
    BOOST_TEST(s.metrics().rejected_for(why) == before + 1, "reason " << int(why));
  };
  auto bad = good;
  bad[5] = std::byte{0x80};  // int8 −128 is not a code
  refused(codec_id::int8, 4, bad, reject_reason::non_finite);
  bad = good;
  const float negative = -1.0f;
  std::memcpy(bad.data(), &negative, 4);  // a negative scale
  refused(codec_id::int8, 4, bad, reject_reason::non_finite);
  bad = good;
  const float infinite = INFINITY;
  std::memcpy(bad.data() + 8, &infinite, 4);  // the second block's scale
  refused(codec_id::int8, 4, bad, reject_reason::non_finite);
  refused(codec_id::int8, 4, std::vector<std::byte>(good.begin(), good.end() - 1), reject_reason::bad_size);
  refused(codec_id::int8, 2, good, reject_reason::bad_size);   // blocks of 2 take 3 · (4 + 2) bytes
  refused(codec_id::int8, 0, good, reject_reason::bad_codec);  // no block
  refused(codec_id::f32, 0, std::vector<std::byte>(24), reject_reason::bad_codec);  // not this model's precision
  BOOST_TEST(s.revision(0) == 0u);
  BOOST_TEST(s.metrics().contributions_accepted == 0u);
  const auto global = s.parameters();
  BOOST_TEST(std::vector<double>(global.begin(), global.end()) == initial, boost::test_tools::per_element());
  // The same contribution, well formed, is then taken: nothing was recorded for it.
  send(0, with_payload(contribution(0, std::vector<double>(6, 0.0), 0, 1, ++sequence), codec_id::int8, 4, good));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(updates_travel_in_the_update_codec_and_the_syncer_keeps_full_precision, fixture) {
  test_syncer s(layout, initial, syncer_end, with_codecs(codec_id::f32, codec_id::bf16, 256));
  join_all(s, 1);
  // Θ₀ becomes 1 + 2⁻⁸ (a tie between two bfloat16s: to the even one, 1)
  // and Θ₁ 2 + 3·2⁻⁷ (a tie between 2 + 2·2⁻⁷ and 2 + 4·2⁻⁷: the even one, 2 + 2⁻⁵).
  std::vector<double> delta(6, 0.0);
  delta[0] = -std::ldexp(1.0, -8);
  delta[1] = -3 * std::ldexp(1.0, -7);
  send(0, contribution(0, delta));
  deliver(s);
  BOOST_TEST_REQUIRE(s.revision(0) == 1u);
  const auto updates = of_kind(inbox(0), message_kind::update);
  BOOST_TEST_REQUIRE(updates.size() == 1u);
  const auto& u = updates[0];
  BOOST_TEST(int(u.header.codec) == int(codec_id::bf16));
  BOOST_TEST(u.header.block == 0u);
  BOOST_TEST_REQUIRE(u.payload.size() == 12u);
  std::vector<double> sent;
  for (std::size_t i = 0; i < 6; ++i) {
    std::uint16_t b;
    std::memcpy(&b, u.payload.data() + 2 * i, 2);
    const std::uint32_t bits = std::uint32_t{b} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    sent.push_back(f);
  }
  const std::vector<double> expected{1.0, 2.0 + std::ldexp(1.0, -5), 3, 4, 5, 6};
  BOOST_TEST(sent == expected, boost::test_tools::per_element());
  // The syncer's own parameters keep every bit.
  BOOST_TEST(s.parameters()[0] == 1.0 + std::ldexp(1.0, -8));
  BOOST_TEST(s.parameters()[1] == 2.0 + 3 * std::ldexp(1.0, -7));
  BOOST_TEST(s.metrics().payload_bytes_sent == 12u + 12u);  // the join's state, then this revision
}

/// Three learners' outer gradients merged by syncers of merge policy `Merge`:
/// one receives them as int4, the other as their decoded values at full
/// precision. The compressed round is summed as it is decoded (a linear
/// merge) or decoded first (any other); either way the result must be the
/// one the decoded values give.
template <class Merge>
void compressed_and_decoded_rounds_merge_alike() {
  using merging_syncer = syncer<outer::nesterov<double>, Merge, inproc::endpoint>;
  constexpr std::size_t n = 6;  // the fixture's layout: blocks of 4 and a tail of 2
  std::vector<std::vector<std::byte>> encoded;
  std::vector<std::vector<double>> decoded;
  splitmix64 rng(7);
  for (int m = 0; m < 3; ++m) {
    std::vector<float> delta(n);
    for (auto& d : delta) d = float(rng.uniform() - 0.5) * float(m + 1);
    auto& bytes = encoded.emplace_back(codec::encoded_size(codec_id::int4, n, 4));
    BOOST_TEST_REQUIRE(codec::encode(
        codec_id::int4, n, 4, [&](std::size_t i) { return delta[i]; }, bytes));
    auto& values = decoded.emplace_back(n);
    codec::decode(codec_id::int4, n, 4, bytes, [&](std::size_t i, float v) { values[i] = v; });
  }
  std::vector<double> results[2];
  for (int compressed = 0; compressed < 2; ++compressed) {
    fixture f;
    auto o = fixture::options(3);
    o.screening.clip_factor = 0.0;  // nothing clipped: the merge alone is compared
    merging_syncer s(f.layout, f.initial, f.syncer_end, o);
    f.join_all(s, 3);
    for (std::uint32_t m = 0; m < 3; ++m) {
      message c = f.contribution(m, decoded[m], 0, 1, 5);
      c.header.tokens = 64 * (m + 1);  // unequal token weights
      if (compressed) c = with_payload(std::move(c), codec_id::int4, 4, encoded[m]);
      f.send(m, std::move(c));
      f.deliver(s);
    }
    BOOST_TEST_REQUIRE(s.revision(0) == 1u);
    results[compressed] = s.parameters();
  }
  BOOST_TEST(results[0] != fixture().initial);
  BOOST_TEST(results[1] == results[0], boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_linear_merge_sums_compressed_contributions_as_it_decodes_them) {
  static_assert(merge::linear<merge::token_weighted> && merge::linear<merge::average>);
  compressed_and_decoded_rounds_merge_alike<merge::token_weighted>();
}

BOOST_AUTO_TEST_CASE(other_merges_get_compressed_contributions_decoded) {
  static_assert(!merge::linear<merge::trimmed_mean<>> && !merge::linear<merge::radial_directional<>>);
  compressed_and_decoded_rounds_merge_alike<merge::trimmed_mean<>>();
  compressed_and_decoded_rounds_merge_alike<merge::radial_directional<>>();
}

BOOST_AUTO_TEST_CASE(a_learner_encodes_its_outer_gradient_in_the_welcome_codec) {
  learner_fixture f(false);
  f.join(codec_id::int4, 4);
  const message m = f.period();
  BOOST_TEST(int(m.header.codec) == int(codec_id::int4));
  BOOST_TEST(m.header.block == 4u);
  BOOST_TEST(f.l.metrics().bytes_sent == 12u);
  // Δ = base − θ = 0 − (0 − 2 · 0.5 · g) = g, in blocks (1, 0.3, 0.2, 0.05) and (1, 0.5, 0.01, −0.7).
  const auto got = read_int4(m);
  const auto& g = f.model.grads;
  for (std::size_t i = 0; i < 8; ++i) BOOST_TEST(got[i] == int4_value(g[i], 1.0), boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(error_feedback_sends_what_the_codec_rounded_away_the_next_time) {
  for (const bool feedback : {false, true}) {
    BOOST_TEST_CONTEXT("error feedback " << feedback) {
      learner_fixture f(feedback);
      f.join(codec_id::int4, 4);
      const auto first = read_int4(f.period());
      // The syncer answers with the learner's own θ as the new global state,
      // so the next outer gradient is again exactly g.
      f.adopt_f32(1, f.model.params);
      const auto second = read_int4(f.period());
      const auto& g = f.model.grads;
      for (std::size_t i = 0; i < 8; ++i) {
        const double e = g[i] - first[i];  // what the first send rounded away
        const double want = feedback ? g[i] + e : g[i];
        // absmax of each block of (g + e): computed from the values themselves.
        double absmax = 0.0;
        for (std::size_t k = i / 4 * 4; k < i / 4 * 4 + 4; ++k)
          absmax = std::max(absmax, std::fabs(feedback ? 2.0 * g[k] - first[k] : double(g[k])));
        BOOST_TEST(second[i] == int4_value(want, absmax), boost::test_tools::tolerance(1e-5));
      }
      // Over the two sends, error feedback loses at most one rounding: the
      // sum of what was sent is within one int4 step of 2g.
      if (feedback)
        for (std::size_t i = 0; i < 8; ++i)
          BOOST_TEST(std::fabs(first[i] + second[i] - 2.0 * g[i]) <= 2.0 / 14.0 + 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_learner_with_non_finite_parameters_sends_nothing_and_stops) {
  learner_fixture f(false);
  f.join(codec_id::int8, 4);
  f.model.grads[3] = NAN;
  for (int i = 0; i < 2; ++i) {
    BOOST_TEST_REQUIRE(f.l.poll(f.now));
    f.l.train_step(0, f.now);
  }
  for (const auto& m : f.received()) BOOST_TEST(int(m.header.kind) != int(message_kind::contribution));
  BOOST_TEST(f.l.error() == make_error_code(errc::non_finite));
  BOOST_TEST(!f.l.poll(f.now));
}

BOOST_AUTO_TEST_CASE(a_learner_takes_the_decoded_update_as_its_base) {
  learner_fixture f(false);
  f.join(codec_id::f32, 0);
  // An int8 update of (1, −0.5, 0.25, 0 | 3, 3, 3, −3) in blocks of 4.
  std::vector<std::byte> bytes = int8_block(1.0f, {127, -64, 32, 0});
  const auto second = int8_block(3.0f, {127, 127, 127, -127});
  bytes.insert(bytes.end(), second.begin(), second.end());
  auto send_update = [&](std::uint64_t revision) {
    message u;
    u.header.kind = message_kind::update;
    u.header.learner = 0;
    u.header.incarnation = 1;
    u.header.revision = revision;
    u.header.element_count = 8;
    u = with_payload(std::move(u), codec_id::int8, 4, bytes);
    BOOST_TEST_REQUIRE(!f.syncer_end.try_send(0, u));
  };
  send_update(1);
  BOOST_TEST_REQUIRE(f.l.poll(f.now));
  BOOST_TEST(f.l.revision(0) == 1u);
  const std::vector<float> expected{1.0f, -64 / 127.0f, 32 / 127.0f, 0.0f, 3.0f, 3.0f, 3.0f, -3.0f};
  for (std::size_t i = 0; i < 8; ++i) BOOST_TEST(f.model.params[i] == expected[i], boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(f.l.metrics().bytes_received == 32u + 16u);  // the f32 state, then this update
  // An update with an invalid code is ignored, not adopted.
  bytes[4] = std::byte{0x80};
  send_update(2);
  const auto ignored = f.l.metrics().updates_ignored;
  BOOST_TEST(f.l.poll(f.now));
  BOOST_TEST(f.l.revision(0) == 1u);
  BOOST_TEST(f.l.metrics().updates_ignored == ignored + 1);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_codecs_test
