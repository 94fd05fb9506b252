// The syncer's saved state (runtime/syncer/state.hpp, metrics/counters.hpp): a
// restored syncer continues exactly as the original would, a truncated or
// foreign state changes nothing, and states written by an older diloco (fewer
// counters, the version-3 format) are read or refused with a reason.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>

namespace runtime_syncer_state_test {

using namespace diloco;
using T = double;
using state_syncer = syncer<outer::nesterov<T>, merge::average, inproc::endpoint>;

struct bench {
  parameter_layout layout;
  inproc::hub hub;
  inproc::endpoint& end = hub.attach(syncer_peer);
  std::vector<inproc::endpoint*> learners{&hub.attach(0), &hub.attach(1)};
  time_point now{};

  bench() {
    layout.add("w", 4);
    layout.add("b", 2);
  }

  static syncer_options options() {
    syncer_options o;
    o.training = training_config{.fragments = 2, .sync_period = 10, .overlap = 0, .mixing = 0.0, .lock_step = false};
    o.quorum = 1;
    o.grace_factor = 0.0;
    o.log = [](const std::string&) {};
    return o;
  }

  void deliver(state_syncer& s) {
    while (auto e = end.try_receive()) s.handle(std::move(*e), now);
  }

  void send(std::uint32_t i, message m) { BOOST_TEST_REQUIRE(!learners[i]->try_send(syncer_peer, m)); }

  message join(std::uint32_t id, std::uint32_t incarnation) const {
    message m;
    m.header.kind = message_kind::join;
    m.header.learner = id;
    m.header.incarnation = incarnation;
    m.header.layout = layout.fingerprint();
    m.header.element_count = layout.size();
    return m;
  }

  static message contribution(std::uint32_t id, std::uint32_t incarnation, std::uint32_t fragment, std::uint64_t base,
                              std::uint64_t sequence, std::vector<T> delta) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::contribution;
    h.codec = codec_id::f64;
    h.learner = id;
    h.incarnation = incarnation;
    h.fragment = fragment;
    h.base_revision = base;
    h.sequence = sequence;
    h.tokens = 64;
    h.steps = 10;
    h.revision = 1000;  // the learner's local step
    h.element_count = delta.size();
    m.payload = byte_buffer(delta.size() * sizeof(T));
    std::copy(delta.begin(), delta.end(), m.payload.as<T>().begin());
    return m;
  }
};

std::string saved(const state_syncer& s) {
  std::ostringstream out;
  s.save(out);
  return out.str();
}

BOOST_AUTO_TEST_SUITE(runtime_syncer_state)

BOOST_FIXTURE_TEST_CASE(a_restored_syncer_continues_exactly_like_the_original, bench) {
  const std::vector<T> initial{1, 2, 3, 4, 5, 6};
  state_syncer a(layout, initial, end, options());
  send(0, join(0, 1));
  send(1, join(1, 2));
  deliver(a);
  // Two rounds on each fragment build up Nesterov momentum.
  const auto sizes = std::vector<std::size_t>{a.plan()[0].size(), a.plan()[1].size()};
  std::uint64_t sequence = 10;
  for (std::uint64_t r = 0; r < 2; ++r)
    for (std::uint32_t p = 0; p < 2; ++p) {
      send(0, contribution(0, 1, p, r, ++sequence, std::vector<T>(sizes[p], 0.5 + double(r))));
      deliver(a);
    }
  BOOST_TEST_REQUIRE(a.revision(0) == 2u);
  const auto state = saved(a);

  // A fresh syncer (other initial parameters) restored from it.
  state_syncer b(layout, std::vector<T>(6, 0.0), end, options());
  std::istringstream in(state);
  b.load(in);
  BOOST_TEST(b.parameters() == a.parameters(), boost::test_tools::per_element());
  BOOST_TEST(b.revision(0) == 2u);
  BOOST_TEST(b.revision(1) == 2u);
  BOOST_TEST(b.metrics().outer_updates == a.metrics().outer_updates);
  BOOST_TEST(b.metrics().contributions_merged == a.metrics().contributions_merged);
  BOOST_TEST(b.live_learners() == 0u);  // everyone must rejoin

  // Both see the same next contribution: identical results mean the
  // momentum came back too.
  for (auto* s : {&a, &b}) {
    if (s == &b) {
      send(0, join(0, 1));
      deliver(b);
    }
    send(0, contribution(0, 1, 0, 2, ++sequence, std::vector<T>(sizes[0], -0.25)));
    deliver(*s);
  }
  BOOST_TEST(b.parameters() == a.parameters(), boost::test_tools::per_element());
  BOOST_TEST(b.revision(0) == 3u);

  // The idempotency keys and incarnations came back: a replay is a duplicate,
  // an older incarnation of learner 1 is dead.
  send(0, join(0, 1));
  deliver(b);
  send(0, contribution(0, 1, 1, 1, 99, std::vector<T>(sizes[1], 1.0)));  // base 1 was merged before the save
  deliver(b);
  BOOST_TEST(b.metrics().rejected_for(reject_reason::duplicate) == 1u);
  send(1, join(1, 1));
  deliver(b);
  BOOST_TEST(b.metrics().rejected_for(reject_reason::dead_incarnation) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_restored_learner_is_bound_to_the_first_peer_that_speaks_for_it, bench) {
  state_syncer a(layout, std::vector<T>(6, 1.0), end, options());
  send(0, join(0, 1));
  deliver(a);
  state_syncer b(layout, std::vector<T>(6, 1.0), end, options());
  std::istringstream in(saved(a));
  b.load(in);
  // Learner 0 keeps training against the restarted syncer without rejoining:
  // its connection (peer) is new, and the first message of its incarnation
  // names it.
  send(1, contribution(0, 1, 0, 0, 7, std::vector<T>(b.plan()[0].size(), 1.0)));  // from endpoint 1 now
  deliver(b);
  BOOST_TEST(b.revision(0) == 1u);
  BOOST_TEST(b.metrics().reconnects == 1u);
  send(0, contribution(0, 1, 1, 0, 8, std::vector<T>(b.plan()[1].size(), 1.0)));  // the old endpoint: no more
  deliver(b);
  BOOST_TEST(b.metrics().rejected_for(reject_reason::wrong_peer) == 1u);
}

BOOST_FIXTURE_TEST_CASE(pending_contributions_are_kept_in_the_checkpoint, bench) {
  auto o = options();
  o.quorum = 2;  // keeps the first contribution pending
  state_syncer a(layout, std::vector<T>(6, 1.0), end, o);
  send(0, join(0, 1));
  send(1, join(1, 1));
  deliver(a);
  send(0, contribution(0, 1, 0, 0, 5, std::vector<T>(a.plan()[0].size(), 1.0)));
  deliver(a);
  BOOST_TEST_REQUIRE(a.metrics().contributions_pending == 1u);
  state_syncer b(layout, std::vector<T>(6, 1.0), end, o);
  std::istringstream in(saved(a));
  b.load(in);
  const auto& m = b.metrics();
  BOOST_TEST(m.contributions_pending == 1u);
  BOOST_TEST(m.contributions_lost == 0u);
  BOOST_TEST(m.contributions_accepted == m.contributions_merged + m.contributions_pending + m.contributions_lost);
  // Saved again, byte for byte the same state: the round came back whole.
  BOOST_TEST(saved(b) == saved(a));
}

BOOST_FIXTURE_TEST_CASE(truncated_or_foreign_state_is_refused_and_changes_nothing, bench) {
  state_syncer a(layout, std::vector<T>{1, 2, 3, 4, 5, 6}, end, options());
  send(0, join(0, 1));
  deliver(a);
  send(0, contribution(0, 1, 0, 0, 5, std::vector<T>(a.plan()[0].size(), 1.0)));
  deliver(a);
  const auto state = saved(a);

  state_syncer b(layout, std::vector<T>(6, 7.0), end, options());
  const auto before = saved(b);
  for (std::size_t n = 0; n < state.size(); ++n) {
    std::istringstream in(state.substr(0, n));
    BOOST_CHECK_THROW(b.load(in), corrupt_state);
    BOOST_TEST_REQUIRE(saved(b) == before, "changed by a state cut at " << n << " bytes");
  }

  parameter_layout other;
  other.add("w", 4);
  other.add("c", 2);  // another name: another model
  inproc::hub h2;
  state_syncer c(other, std::vector<T>(6, 0.0), h2.attach(syncer_peer), options());
  std::istringstream in(state);
  BOOST_CHECK_THROW(c.load(in), corrupt_state);

  auto three = options();
  three.training.fragments = 3;
  inproc::hub h3;
  state_syncer d(layout, std::vector<T>(6, 0.0), h3.attach(syncer_peer), three);
  std::istringstream in3(state);
  BOOST_CHECK_THROW(d.load(in3), corrupt_state);
}

/// A counters block written by hand: `counters` counters valued 1, 2, …,
/// then `reasons` refusal counts valued 1001, 1002, ….
std::string counters_block(std::uint32_t counters, std::uint32_t reasons) {
  std::ostringstream out;
  out.write("SMET", 4);
  serial::write_pod<std::uint32_t>(out, 1);
  serial::write_pod(out, counters);
  for (std::uint64_t i = 1; i <= counters; ++i) serial::write_pod(out, i);
  serial::write_pod(out, reasons);
  for (std::uint64_t r = 1; r <= reasons; ++r) serial::write_pod(out, 1000 + r);
  return out.str();
}

BOOST_AUTO_TEST_CASE(counters_round_trip_field_by_field) {
  syncer_metrics m;
  std::uint64_t v = 0;
  for (const auto field : syncer_counter_fields) m.*field = ++v * 3;
  for (auto& r : m.rejected) r = ++v * 3;
  std::ostringstream out;
  write_syncer_metrics(out, m);
  // Tag, version, two counts and 8 bytes per counter.
  BOOST_TEST(out.str().size() == 4 + 4 + 4 + 8 * 31 + 4 + 8 * 26);
  std::istringstream in(out.str());
  const auto back = read_syncer_metrics(in);
  BOOST_TEST(back.outer_updates == 3u);
  BOOST_TEST(back.staleness_max == 66u);   // the 22nd counter
  BOOST_TEST(back.partial_rounds == 69u);  // the 23rd
  BOOST_TEST(back.tokens_merged == 72u);
  BOOST_TEST(back.steps_merged == 75u);            // the 25th
  BOOST_TEST(back.contributions_replayed == 78u);  // the 26th
  BOOST_TEST(back.losses_ignored == 81u);          // the 27th
  BOOST_TEST(back.payload_bytes_received == 84u);
  BOOST_TEST(back.payload_bytes_sent == 87u);      // the 29th
  BOOST_TEST(back.steps_reported_earlier == 90u);  // the 30th
  BOOST_TEST(back.counts_capped == 93u);           // the 31st
  BOOST_TEST(back.rejected_for(reject_reason::truncated) == 96u);
  BOOST_TEST(back.rejected_for(reject_reason::quarantined) == 168u);  // the 25th reason: (31 + 25) × 3
  BOOST_TEST(back.rejected_for(reject_reason::over_budget) == 171u);  // the 26th
  BOOST_TEST(back.rejected_for(reject_reason::none) == 0u);
}

BOOST_AUTO_TEST_CASE(counters_saved_before_a_reason_or_a_counter_existed_read_as_zero) {
  // 21 counters and 24 reasons: a diloco that knew neither staleness_max nor
  // `quarantined` refusals.
  std::istringstream in(counters_block(21, 24));
  const auto m = read_syncer_metrics(in);
  BOOST_TEST(m.outer_updates == 1u);
  BOOST_TEST(m.staleness_sum == 21u);
  BOOST_TEST(m.staleness_max == 0u);
  BOOST_TEST(m.rejected_for(reject_reason::truncated) == 1001u);
  BOOST_TEST(m.rejected_for(reject_reason::bad_counts) == 1024u);
  BOOST_TEST(m.rejected_for(reject_reason::quarantined) == 0u);
  // 22 counters: saved before partial_rounds existed.
  std::istringstream before_partial_rounds(counters_block(22, 25));
  const auto p = read_syncer_metrics(before_partial_rounds);
  BOOST_TEST(p.staleness_max == 22u);
  BOOST_TEST(p.partial_rounds == 0u);
  BOOST_TEST(p.tokens_merged == 0u);
}

BOOST_AUTO_TEST_CASE(counters_of_a_newer_diloco_are_refused_by_name) {
  auto refused = [](const std::string& block, const std::string& what) {
    std::istringstream in(block);
    try {
      read_syncer_metrics(in);
    } catch (const corrupt_state& e) {
      return std::string(e.what()).find(what) != std::string::npos;
    }
    return false;
  };
  BOOST_TEST(refused(counters_block(32, 26), "32 counters, this version knows 31"));
  BOOST_TEST(refused(counters_block(31, 27), "27 refusal reasons, this version knows 26"));
  BOOST_TEST(refused(counters_block(31, 26).substr(0, 40), "truncated"));
}

BOOST_FIXTURE_TEST_CASE(a_version_3_state_with_raw_counters_is_read, bench) {
  // Written by hand in the version-3 layout: one learner, two fragments, the
  // counters as the struct was dumped then (11 counters, 25 reasons, 11
  // counters, valued 1 … 47), then Nesterov's state with no fragment yet.
  const auto plan = fragment_plan::balanced(layout, 2);
  std::ostringstream out;
  out.write("SYNC", 4);
  serial::write_pod<std::uint32_t>(out, 3);
  serial::write_pod<std::uint64_t>(out, layout.fingerprint());
  serial::write_pod<std::uint64_t>(out, layout.size());
  serial::write_pod<std::uint32_t>(out, 2);
  for (std::uint32_t p = 0; p < 2; ++p) {
    serial::write_pod<std::uint64_t>(out, 7 + p);                       // revision
    serial::write_array(out, std::vector<T>(plan[p].size(), 0.5 + p));  // values
    serial::write_pod<std::uint64_t>(out, 1);                           // one idempotency key
    serial::write_pod<std::uint32_t>(out, 0);                           // learner 0
    serial::write_pod<std::uint32_t>(out, 1);                           // incarnation 1
    serial::write_pod<std::uint64_t>(out, 6 + p);                       // base revision
    serial::write_pod<std::uint64_t>(out, 40 + p);                      // sequence
  }
  serial::write_pod<std::uint64_t>(out, 1);  // learners
  serial::write_pod<std::uint32_t>(out, 0);  // id
  serial::write_pod<std::uint32_t>(out, 1);  // incarnation
  serial::write_pod<std::uint8_t>(out, 0);   // neither left nor quarantined
  serial::write_pod<std::uint32_t>(out, 0);  // strikes
  serial::write_array(out, std::vector<double>{2.0, 2.0});
  for (std::uint64_t v = 1; v <= 47; ++v) serial::write_pod(out, v);
  outer::nesterov<T>().save(out);

  state_syncer b(layout, std::vector<T>(6, 0.0), end, options());
  std::istringstream in(out.str());
  b.load(in);
  BOOST_TEST(b.revision(0) == 7u);
  BOOST_TEST(b.revision(1) == 8u);
  BOOST_TEST(b.fragment_values(1)[0] == 1.5);
  const auto& m = b.metrics();
  BOOST_TEST(m.outer_updates == 1u);
  BOOST_TEST(m.contributions_accepted == 2u);
  BOOST_TEST(m.contributions_pending == 0u);    // 4 pending when it stopped:
  BOOST_TEST(m.contributions_lost == 5u + 4u);  // counted lost
  BOOST_TEST(m.learners_forgotten == 11u);
  BOOST_TEST(m.rejected_for(reject_reason::truncated) == 12u);
  BOOST_TEST(m.rejected_for(reject_reason::quarantined) == 36u);
  BOOST_TEST(m.joins == 37u);
  BOOST_TEST(m.staleness_max == 47u);
  // The key came back: learner 0's replay of sequence 40 against base 6 is
  // a duplicate.
  send(0, join(0, 1));
  deliver(b);
  send(0, contribution(0, 1, 0, 6, 40, std::vector<T>(plan[0].size(), 1.0)));
  deliver(b);
  // Reason 18 was restored as the 31st value (12 + 18): one more now.
  BOOST_TEST(b.metrics().rejected_for(reject_reason::duplicate) == 31u);
}

BOOST_FIXTURE_TEST_CASE(the_work_the_learners_reported_survives_a_restart, bench) {
  // Learner 0 (incarnation 1) reports 30 computed steps and learner 1
  // (incarnation 2) 20; learner 1 then restarts as incarnation 3, which
  // retires its 20 into the syncer's counters. After a save and a restore the
  // syncer still counts 30 + 20 = 50; a later, larger report of learner 0's
  // same incarnation (45) replaces its 30 rather than adding to it: 65. One
  // fragment of the two merged a 10-step contribution: 10 / (2 × 65).
  state_syncer a(layout, std::vector<T>(6, 1.0), end, options());
  send(0, join(0, 1));
  send(1, join(1, 2));
  deliver(a);
  auto heartbeat = [&](std::uint32_t id, std::uint32_t incarnation, std::uint64_t steps) {
    message m;
    m.header.kind = message_kind::heartbeat;
    m.header.learner = id;
    m.header.incarnation = incarnation;
    m.header.steps = steps;
    send(id, std::move(m));
  };
  heartbeat(0, 1, 30);
  heartbeat(1, 2, 20);
  deliver(a);
  send(1, join(1, 3));
  deliver(a);
  send(0, contribution(0, 1, 0, 0, 1, std::vector<T>(a.plan()[0].size(), 0.5)));
  deliver(a);
  BOOST_TEST_REQUIRE(a.revision(0) == 1u);
  BOOST_TEST_REQUIRE(a.steps_computed() == 50u);

  state_syncer b(layout, std::vector<T>(6, 0.0), end, options());
  std::istringstream in(saved(a));
  b.load(in);
  BOOST_TEST(b.steps_computed() == 50u);
  send(0, join(0, 1));
  deliver(b);
  heartbeat(0, 1, 45);
  deliver(b);
  BOOST_TEST(b.steps_computed() == 65u);
  BOOST_TEST_REQUIRE(b.compute_efficiency().has_value());
  BOOST_TEST(*b.compute_efficiency() == 10.0 / (2.0 * 65.0), boost::test_tools::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(a_state_of_an_unknown_version_is_refused_by_name, bench) {
  state_syncer a(layout, std::vector<T>(6, 1.0), end, options());
  auto state = saved(a);
  const std::uint32_t two = 2;
  state.replace(4, 4, reinterpret_cast<const char*>(&two), 4);
  state_syncer b(layout, std::vector<T>(6, 1.0), end, options());
  std::istringstream in(state);
  try {
    b.load(in);
    BOOST_FAIL("a version-2 state was read");
  } catch (const corrupt_state& e) {
    BOOST_TEST(std::string(e.what()).find("unsupported state version 2") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_syncer_state_test
