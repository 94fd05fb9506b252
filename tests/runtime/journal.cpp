// Nothing acknowledged is lost: open rounds in checkpoints, the contribution
// journal, and the syncer taking journaled contributions back exactly once.
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco/runtime/journal.hpp>

#include "support/syncer_fixture.hpp"

namespace runtime_journal_test {

using namespace syncer_test;

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
}

std::size_t acks(std::vector<message>&& inbox) { return fixture::of_kind(std::move(inbox), message_kind::ack).size(); }

BOOST_AUTO_TEST_SUITE(runtime_journal)

BOOST_AUTO_TEST_CASE(records_round_trip_and_reading_stops_at_a_torn_or_corrupt_record) {
  fixture fx;
  scratch_dir dir;
  const auto path = dir.path / "journal.bin";
  const std::vector<std::vector<double>> deltas{{1, 2, 3, 4, 5, 6}, {-1, 0.5, 0, 0, 0, 1e-300}, {7, 7, 7, 7, 7, 7}};
  {
    contribution_journal journal(path);
    for (std::uint32_t i = 0; i < 3; ++i) journal.append(fx.contribution(i, deltas[i], i, i + 1, 10 + i));
    BOOST_TEST(journal.appended() == 3u);
  }
  const std::uint64_t record = wire::header_size + 6 * sizeof(double);
  BOOST_TEST(std::filesystem::file_size(path) == 3 * record);
  auto read = contribution_journal::read(path, 1 << 20);
  BOOST_TEST_REQUIRE(read.messages.size() == 3u);
  BOOST_TEST(read.torn_bytes == 0u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    const auto& h = read.messages[i].header;
    BOOST_TEST((h.kind == message_kind::contribution));
    BOOST_TEST(h.learner == i);
    BOOST_TEST(h.incarnation == i + 1);
    BOOST_TEST(h.base_revision == i);
    BOOST_TEST(h.sequence == 10 + i);
    BOOST_TEST(h.tokens == 640u);
    BOOST_TEST(h.steps == 10u);
    BOOST_TEST(values(read.messages[i]) == deltas[i]);
  }

  // A crash in the middle of an append: the first half of a record follows.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write(bytes.data(), static_cast<std::streamsize>(record / 2));
  }
  read = contribution_journal::read(path, 1 << 20);
  BOOST_TEST(read.messages.size() == 3u);
  BOOST_TEST(read.torn_bytes == record / 2);

  // A flipped payload byte in the second record: the first record only.
  bytes[record + wire::header_size + 3] ^= 0x10;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  read = contribution_journal::read(path, 1 << 20);
  BOOST_TEST(read.messages.size() == 1u);
  BOOST_TEST(read.torn_bytes == 2 * record);

  // Over the payload limit: refused like on the wire.
  BOOST_TEST(contribution_journal::read(path, 6 * sizeof(double) - 1).messages.size() == 0u);

  contribution_journal again(path);
  again.clear();
  BOOST_TEST(std::filesystem::file_size(path) == 0u);
  BOOST_TEST(contribution_journal::read(path, 1 << 20).messages.empty());
  BOOST_TEST(contribution_journal::read(dir.path / "absent.bin", 1 << 20).messages.empty());
}

BOOST_AUTO_TEST_CASE(an_open_round_survives_a_checkpoint) {
  fixture fx;
  test_syncer a(fx.layout, fx.initial, fx.syncer_end, fixture::options(3), outer::sgd<double>({.learning_rate = 1.0}));
  fx.join_all(a, 3);
  const std::vector<double> d0{1, 1, 1, 1, 1, 1}, d1{0, 2, 0, 2, 0, 2}, d2{3, 0, 3, 0, 3, 0};
  fx.send(0, fx.contribution(0, d0));
  fx.send(1, fx.contribution(1, d1));
  fx.deliver(a);
  BOOST_TEST(acks(fx.inbox(0)) == 1u);
  BOOST_TEST(acks(fx.inbox(1)) == 1u);
  BOOST_TEST_REQUIRE(a.metrics().contributions_pending == 2u);
  std::ostringstream saved;
  a.save(saved);

  fixture fy;  // the restarted syncer: new connections
  test_syncer b(fy.layout, fy.initial, fy.syncer_end, fixture::options(3), outer::sgd<double>({.learning_rate = 1.0}));
  std::istringstream in(saved.str());
  b.load(in, fy.now);
  BOOST_TEST(b.metrics().contributions_pending == 2u);
  BOOST_TEST(b.metrics().contributions_lost == 0u);
  BOOST_TEST(b.revision(0) == 0u);
  fy.join_all(b, 3);
  fy.send(2, fy.contribution(2, d2));
  fy.deliver(b);
  BOOST_TEST_REQUIRE(b.revision(0) == 1u);
  check_close(b.parameters(), minus_mean(fx.initial, {d0, d1, d2}));
  BOOST_TEST(b.metrics().contributions_merged == 3u);
  BOOST_TEST(b.metrics().contributions_pending == 0u);
  // Its contributors are told: the update answers learners 0 and 1 too.
  const auto updates = fixture::of_kind(fy.inbox(0), message_kind::update);
  BOOST_TEST_REQUIRE(!updates.empty());
  BOOST_TEST(updates.back().header.answers == 1u);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_written_before_publishing_does_not_hold_the_round_it_publishes) {
  fixture fx;
  std::string saved;
  test_syncer* self = nullptr;
  auto options = fixture::options(2);
  options.before_publish = [&](const update_event&) {
    std::ostringstream out;
    self->save(out);
    saved = out.str();
  };
  test_syncer a(fx.layout, fx.initial, fx.syncer_end, options, outer::sgd<double>({.learning_rate = 1.0}));
  self = &a;
  fx.join_all(a, 2);
  const std::vector<double> d0{1, 2, 3, 4, 5, 6}, d1{6, 5, 4, 3, 2, 1};
  fx.send(0, fx.contribution(0, d0));
  fx.send(1, fx.contribution(1, d1));
  fx.deliver(a);
  BOOST_TEST_REQUIRE(a.revision(0) == 1u);
  BOOST_TEST_REQUIRE(!saved.empty());

  fixture fy;
  test_syncer b(fy.layout, fy.initial, fy.syncer_end, fixture::options(2), outer::sgd<double>({.learning_rate = 1.0}));
  std::istringstream in(saved);
  b.load(in, fy.now);
  BOOST_TEST(b.revision(0) == 1u);
  BOOST_TEST(b.metrics().contributions_pending == 0u);
  const auto once = minus_mean(fx.initial, {d0, d1});
  check_close(b.parameters(), once);
  // The next round starts from the published revision: merged once, not twice.
  fy.join_all(b, 2);
  const std::vector<double> e0{1, 0, 0, 0, 0, 0}, e1{0, 0, 0, 0, 0, 1};
  fy.send(0, fy.contribution(0, e0, 1, 1, 2));
  fy.send(1, fy.contribution(1, e1, 1, 1, 2));
  fy.deliver(b);
  BOOST_TEST_REQUIRE(b.revision(0) == 2u);
  check_close(b.parameters(), minus_mean(once, {e0, e1}));
}

BOOST_AUTO_TEST_CASE(acknowledged_contributions_come_back_from_the_journal_exactly_once) {
  fixture fx;
  scratch_dir dir;
  contribution_journal journal(dir.path / "journal.bin");
  std::string checkpoint;
  test_syncer* self = nullptr;
  auto options = fixture::options(3);
  options.before_ack = [&](const message& m) { journal.append(m); };
  options.before_publish = [&](const update_event&) {
    std::ostringstream out;
    self->save(out);
    checkpoint = out.str();
    journal.clear();
  };
  auto a = std::make_unique<test_syncer>(fx.layout, fx.initial, fx.syncer_end, options,
                                         outer::sgd<double>({.learning_rate = 1.0}));
  self = a.get();
  fx.join_all(*a, 3);
  // Round 1, merged and checkpointed.
  const std::vector<double> r0{1, 1, 1, 1, 1, 1}, r1{2, 2, 2, 2, 2, 2}, r2{3, 3, 3, 3, 3, 3};
  fx.send(0, fx.contribution(0, r0));
  fx.send(1, fx.contribution(1, r1));
  fx.send(2, fx.contribution(2, r2));
  fx.deliver(*a);
  BOOST_TEST_REQUIRE(a->revision(0) == 1u);
  for (std::uint32_t i = 0; i < 3; ++i) fx.inbox(i);
  // Round 2: two contributions acknowledged, then the syncer dies.
  const std::vector<double> d0{1, 0, 1, 0, 1, 0}, d1{0, 4, 0, 4, 0, 4}, d2{2, 2, 0, 0, 2, 2};
  fx.send(0, fx.contribution(0, d0, 1, 1, 2));
  fx.send(1, fx.contribution(1, d1, 1, 1, 2));
  fx.deliver(*a);
  BOOST_TEST(acks(fx.inbox(0)) == 1u);
  BOOST_TEST(acks(fx.inbox(1)) == 1u);
  BOOST_TEST(journal.appended() == 5u);
  a.reset();

  fixture fy;
  test_syncer b(fy.layout, fy.initial, fy.syncer_end, fixture::options(3), outer::sgd<double>({.learning_rate = 1.0}));
  std::istringstream in(checkpoint);
  b.load(in, fy.now);
  BOOST_TEST_REQUIRE(b.revision(0) == 1u);
  BOOST_TEST(b.metrics().contributions_pending == 0u);
  const auto accepted_at_checkpoint = b.metrics().contributions_accepted;
  auto journaled = contribution_journal::read(dir.path / "journal.bin", 1 << 20);
  BOOST_TEST_REQUIRE(journaled.messages.size() == 2u);
  std::vector<message> copies;
  for (const auto& m : journaled.messages) {
    message c;
    c.header = m.header;
    c.payload = byte_buffer(m.payload.size());
    std::copy(m.payload.bytes().begin(), m.payload.bytes().end(), c.payload.bytes().begin());
    copies.push_back(std::move(c));
  }
  for (auto& m : journaled.messages) BOOST_TEST(b.replay(std::move(m), fy.now));
  BOOST_TEST(b.metrics().contributions_pending == 2u);
  BOOST_TEST(b.metrics().contributions_replayed == 2u);
  BOOST_TEST(b.metrics().contributions_accepted == accepted_at_checkpoint + 2);
  // Exactly once: the same records again, and one the checkpoint merged.
  for (auto& m : copies) BOOST_TEST(!b.replay(std::move(m), fy.now));
  BOOST_TEST(!b.replay(fx.contribution(2, r2), fy.now));
  BOOST_TEST(b.metrics().contributions_pending == 2u);
  // Nothing was answered: the learners are not connected yet.
  for (std::uint32_t i = 0; i < 3; ++i) BOOST_TEST(fy.inbox(i).empty());

  fy.join_all(b, 3);
  fy.send(2, fy.contribution(2, d2, 1, 1, 2));
  fy.deliver(b);
  BOOST_TEST_REQUIRE(b.revision(0) == 2u);
  check_close(b.parameters(), minus_mean(minus_mean(fx.initial, {r0, r1, r2}), {d0, d1, d2}));
  BOOST_TEST(b.metrics().contributions_merged == 6u);
}

BOOST_AUTO_TEST_CASE(a_contribution_the_journal_cannot_take_is_neither_recorded_nor_acknowledged) {
  fixture fx;
  bool disk_full = true;
  auto options = fixture::options(2);
  options.before_ack = [&](const message&) {
    if (disk_full) throw std::runtime_error("no space left");
  };
  test_syncer s(fx.layout, fx.initial, fx.syncer_end, options, outer::sgd<double>({.learning_rate = 1.0}));
  fx.join_all(s, 2);
  fx.send(0, fx.contribution(0, {1, 1, 1, 1, 1, 1}));
  BOOST_CHECK_THROW(fx.deliver(s), std::runtime_error);
  BOOST_TEST(acks(fx.inbox(0)) == 0u);
  BOOST_TEST(s.metrics().contributions_accepted == 0u);
  BOOST_TEST(s.metrics().contributions_pending == 0u);
  // Once the journal takes it, the very same contribution is accepted: it
  // was not recorded as seen.
  disk_full = false;
  fx.send(0, fx.contribution(0, {1, 1, 1, 1, 1, 1}));
  fx.deliver(s);
  BOOST_TEST(acks(fx.inbox(0)) == 1u);
  BOOST_TEST(s.metrics().contributions_pending == 1u);
}

BOOST_AUTO_TEST_CASE(replay_refuses_what_a_learner_could_not_have_sent) {
  fixture fx;
  test_syncer s(fx.layout, fx.initial, fx.syncer_end, fixture::options(2), outer::sgd<double>({.learning_rate = 1.0}));
  auto wrong_size = fx.contribution(0, {1, 1, 1});
  BOOST_TEST(!s.replay(std::move(wrong_size), fx.now));
  auto future = fx.contribution(0, {1, 1, 1, 1, 1, 1}, 5);
  BOOST_TEST(!s.replay(std::move(future), fx.now));
  auto infinite = fx.contribution(0, {1, 1, 1, 1, 1, std::numeric_limits<double>::infinity()});
  BOOST_TEST(!s.replay(std::move(infinite), fx.now));
  auto no_work = fx.contribution(0, {1, 1, 1, 1, 1, 1});
  no_work.header.steps = 0;
  BOOST_TEST(!s.replay(std::move(no_work), fx.now));
  auto not_a_contribution = fx.heartbeat(0);
  BOOST_TEST(!s.replay(std::move(not_a_contribution), fx.now));
  BOOST_TEST(s.metrics().contributions_pending == 0u);
  BOOST_TEST(s.known_learners() == 0u);
  auto fine = fx.contribution(3, {1, 1, 1, 1, 1, 1});
  BOOST_TEST(s.replay(std::move(fine), fx.now));
  BOOST_TEST(s.known_learners() == 1u);
  BOOST_TEST(s.live_learners() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_journal_test
