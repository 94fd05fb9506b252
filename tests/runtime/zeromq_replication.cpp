// ctest-labels: unit zeromq threads
// The replication stream (docs/protocol.md, "Replication"): its records, a
// standby's replica refusing what does not follow, and a primary over real
// ZeroMQ sockets whose acknowledgements wait for the standby, so that the
// standby, promoted from its own directory, merges what the dead primary
// acknowledged — checked against Θ − mean(Δ) computed here.
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <diloco/runtime/journal.hpp>
#include <diloco/runtime/replication.hpp>
#include <diloco/transport/zeromq/replication.hpp>

#include "support/syncer_fixture.hpp"

namespace runtime_zeromq_replication_test {

using namespace syncer_test;
using diloco::zeromq::replication_follower;
using diloco::zeromq::replication_mode;
using diloco::zeromq::replication_source;

/// A checkpoint body of a syncer over the fixture's model, at its start.
std::string fresh_body(fixture& fx) {
  test_syncer s(fx.layout, fx.initial, fx.syncer_end, fixture::options(3), outer::sgd<double>({.learning_rate = 1.0}));
  return checkpoint_body(s);
}

std::size_t journaled(const std::filesystem::path& dir) {
  return contribution_journal::read(dir / "journal.bin", 1 << 20).messages.size();
}

BOOST_AUTO_TEST_SUITE(runtime_zeromq_replication)

BOOST_AUTO_TEST_CASE(a_record_decodes_to_itself_and_every_damage_is_refused) {
  const replication_record r{replication_kind::journal, 7, 42, "some body bytes"};
  const auto bytes = r.encode();
  BOOST_TEST(bytes.size() == replication_record::header_bytes + r.body.size());
  BOOST_TEST(bytes.substr(0, 4) == "DLRS");
  const auto back = replication_record::decode(bytes, 1 << 20);
  BOOST_TEST((back.kind == r.kind));
  BOOST_TEST(back.epoch == 7u);
  BOOST_TEST(back.sequence == 42u);
  BOOST_TEST(back.body == r.body);
  // Every byte flipped, header or body, is caught by a check.
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto damaged = bytes;
    damaged[i] ^= 0x01;
    BOOST_CHECK_THROW(replication_record::decode(damaged, 1 << 20), corrupt_state);
  }
  BOOST_CHECK_THROW(replication_record::decode(bytes.substr(0, 39), 1 << 20), corrupt_state);  // cut in the header
  BOOST_CHECK_THROW(replication_record::decode(bytes.substr(0, bytes.size() - 1), 1 << 20), corrupt_state);
  BOOST_CHECK_THROW(replication_record::decode(bytes + "x", 1 << 20), corrupt_state);
  BOOST_CHECK_THROW(replication_record::decode(bytes, r.body.size() - 1), corrupt_state);  // over the limit
  BOOST_CHECK_NO_THROW(replication_record::decode(bytes, r.body.size()));
  // An unknown kind with a valid CRC: refused for the kind.
  auto unknown = replication_record{replication_kind::ack, 1, 1, {}}.encode();
  unknown[6] = 9;
  const auto header_crc = crc32c(std::as_bytes(std::span<const char>(unknown.data(), 36)));
  std::memcpy(unknown.data() + 36, &header_crc, 4);
  BOOST_CHECK_EXCEPTION(replication_record::decode(unknown, 0), corrupt_state, [](const corrupt_state& e) {
    return std::string(e.what()).find("unknown kind") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(a_replica_writes_only_what_follows_its_snapshot_in_its_epoch) {
  fixture fx;
  scratch_dir dir;
  checkpoint_store store(dir.path);
  contribution_journal journal(dir.path / "journal.bin");
  replica copy(store, journal, 1 << 20);
  copy.follow(5);
  const auto contribution = [&](std::uint32_t id, std::uint64_t sequence) {
    return replication_record{replication_kind::journal, 5, sequence,
                              replication_record::journal_body(fx.contribution(id, {1, 2, 3, 4, 5, 6}))};
  };
  // Before any snapshot: nothing is taken.
  BOOST_CHECK_THROW(copy.apply(contribution(0, 1)), corrupt_state);
  BOOST_CHECK_THROW(copy.apply({replication_kind::snapshot, 5, 1, "not a checkpoint body"}), corrupt_state);
  BOOST_CHECK_THROW(copy.apply({replication_kind::snapshot, 4, 1, fresh_body(fx)}), corrupt_state);  // old epoch
  BOOST_TEST(!store.latest());
  BOOST_TEST(journaled(dir.path) == 0u);

  BOOST_TEST(copy.apply({replication_kind::snapshot, 5, 10, fresh_body(fx)}) == 10u);
  BOOST_TEST(copy.ready());
  BOOST_TEST_REQUIRE(store.latest().has_value());
  BOOST_TEST(store.latest()->body == fresh_body(fx));
  BOOST_TEST(copy.apply(contribution(0, 11)) == 11u);
  BOOST_TEST(copy.apply(contribution(1, 12)) == 12u);
  BOOST_TEST(journaled(dir.path) == 2u);
  // A gap, a repeat, another epoch, a journal body that is not a contribution: refused, nothing written.
  BOOST_CHECK_THROW(copy.apply(contribution(2, 14)), corrupt_state);
  BOOST_CHECK_THROW(copy.apply(contribution(2, 12)), corrupt_state);
  auto other_epoch = contribution(2, 13);
  other_epoch.epoch = 6;
  BOOST_CHECK_THROW(copy.apply(other_epoch), corrupt_state);
  BOOST_CHECK_THROW(copy.apply({replication_kind::journal, 5, 13, replication_record::journal_body(fixture::leave(2))}),
                    corrupt_state);
  auto torn = contribution(2, 13);
  torn.body.pop_back();
  BOOST_CHECK_THROW(copy.apply(torn), corrupt_state);
  BOOST_TEST(journaled(dir.path) == 2u);
  BOOST_TEST(copy.written() == 12u);
  // A new snapshot empties the journal: the checkpoint holds it all.
  BOOST_TEST(copy.apply({replication_kind::snapshot, 5, 13, fresh_body(fx)}) == 13u);
  BOOST_TEST(journaled(dir.path) == 0u);
  BOOST_TEST(copy.snapshots() == 2u);
  BOOST_TEST(copy.journaled() == 2u);
}

/// A standby on its own thread: follows `endpoint` into `dir` until stopped.
struct standby {
  scratch_dir dir;
  checkpoint_store store{dir.path};
  contribution_journal journal{dir.path / "journal.bin"};
  replica copy{store, journal, 1 << 20};
  std::atomic<bool> stop{false};
  std::thread thread;

  standby(::zmq::context_t& context, const std::string& endpoint, std::uint64_t epoch) {
    thread = std::thread([this, &context, endpoint, epoch] {
      replication_follower follower(context, copy, "standby", {}, {});
      follower.follow(endpoint, epoch);
      while (!stop) follower.pump_for(std::chrono::milliseconds(20));
    });
  }
  ~standby() {
    stop = true;
    thread.join();
  }
};

BOOST_AUTO_TEST_CASE(a_synchronous_standby_holds_every_acknowledged_contribution_and_takes_over_with_them) {
  fixture fx;
  scratch_dir primary_dir;
  ::zmq::context_t context;
  replication_source source(context, "tcp://127.0.0.1:*", 3,
                            {.mode = replication_mode::synchronous, .timeout = std::chrono::seconds(30)});
  standby b(context, source.endpoint(), 3);

  checkpoint_store store(primary_dir.path);
  contribution_journal journal(primary_dir.path / "journal.bin");
  std::vector<std::size_t> standby_had;  // what the standby's journal held as each acknowledgement left
  test_syncer* self = nullptr;
  auto options = fixture::options(3);
  options.before_ack = [&](const message& m) {
    journal.append(m);
    source.journal(m);
    standby_had.push_back(journaled(b.dir.path));
  };
  auto checkpoint = [&] {
    auto body = checkpoint_body(*self);
    store.write(body);
    journal.clear();
    source.snapshot(std::move(body));
  };
  options.before_publish = [&](const update_event&) { checkpoint(); };
  auto a = std::make_unique<test_syncer>(fx.layout, fx.initial, fx.syncer_end, options,
                                         outer::sgd<double>({.learning_rate = 1.0}));
  self = a.get();
  // The standby follows before the first snapshot exists: it gets it as it is written.
  for (int i = 0; i < 200 && source.followers() == 0; ++i) {
    source.poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  BOOST_TEST_REQUIRE(source.followers() == 1u);
  checkpoint();
  fx.join_all(*a, 3);
  const std::vector<double> r0{1, 1, 1, 1, 1, 1}, r1{2, 2, 2, 2, 2, 2}, r2{3, 3, 3, 3, 3, 3};
  fx.send(0, fx.contribution(0, r0));
  fx.send(1, fx.contribution(1, r1));
  fx.send(2, fx.contribution(2, r2));
  fx.deliver(*a);
  BOOST_TEST_REQUIRE(a->revision(0) == 1u);
  const std::vector<double> d0{1, 0, 1, 0, 1, 0}, d1{0, 4, 0, 4, 0, 4}, d2{2, 2, 0, 0, 2, 2};
  fx.send(0, fx.contribution(0, d0, 1, 1, 2));
  fx.send(1, fx.contribution(1, d1, 1, 1, 2));
  fx.deliver(*a);
  // At each acknowledgement the standby had it: 1, 2, 3 records in round 1
  // (then the checkpoint before publishing emptied the journal), 1, 2 now.
  BOOST_TEST(standby_had == (std::vector<std::size_t>{1, 2, 3, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(source.dropped() == 0u);
  a.reset();  // the primary dies, its directory with it
  std::filesystem::remove_all(primary_dir.path);

  // The standby takes over from its own directory, as diloco_syncer does.
  fixture fy;
  const auto latest = b.store.latest();
  BOOST_TEST_REQUIRE(latest.has_value());
  auto saved = read_checkpoint_body(latest->body);
  test_syncer c(fy.layout, fy.initial, fy.syncer_end, fixture::options(3), outer::sgd<double>({.learning_rate = 1.0}));
  std::istringstream in(saved.state);
  c.load(in, fy.now);
  BOOST_TEST_REQUIRE(c.revision(0) == 1u);
  for (auto& m : contribution_journal::read(b.dir.path / "journal.bin", 1 << 20).messages)
    BOOST_TEST(c.replay(std::move(m), fy.now));
  BOOST_TEST(c.metrics().contributions_pending == 2u);
  fy.join_all(c, 3);
  fy.send(2, fy.contribution(2, d2, 1, 1, 2));
  fy.deliver(c);
  BOOST_TEST_REQUIRE(c.revision(0) == 2u);
  const auto want = minus_mean(minus_mean(fx.initial, {r0, r1, r2}), {d0, d1, d2});
  const auto got = c.parameters();
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
}

/// A follower that sends `follow` and then never acknowledges anything.
struct silent_standby {
  ::zmq::socket_t socket;
  silent_standby(::zmq::context_t& context, const std::string& endpoint) : socket(context, ::zmq::socket_type::dealer) {
    socket.set(::zmq::sockopt::linger, 0);
    socket.connect(endpoint);
    const auto follow = replication_record{replication_kind::follow, 0, 0, "silent"}.encode();
    socket.send(::zmq::buffer(follow));
  }
};

BOOST_AUTO_TEST_CASE(a_standby_that_stops_answering_is_dropped_in_sync_mode_and_never_waited_for_in_async) {
  fixture fx;
  ::zmq::context_t context;
  for (const auto mode : {replication_mode::synchronous, replication_mode::asynchronous}) {
    replication_source source(context, "tcp://127.0.0.1:*", 1,
                              {.mode = mode, .timeout = std::chrono::milliseconds(200)});
    silent_standby quiet(context, source.endpoint());
    for (int i = 0; i < 200 && source.followers() == 0; ++i) {
      source.poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    BOOST_TEST_REQUIRE(source.followers() == 1u);
    source.snapshot(fresh_body(fx));
    source.journal(fx.contribution(0, {1, 2, 3, 4, 5, 6}));
    const bool sync = mode == replication_mode::synchronous;
    BOOST_TEST(source.followers() == (sync ? 0u : 1u));
    BOOST_TEST(source.dropped() == (sync ? 1u : 0u));
    BOOST_TEST(source.sequence() == 2u);
    // What the silent standby received: the snapshot, then (sync) the note that it was dropped.
    std::vector<replication_kind> kinds;
    ::zmq::message_t part;
    for (int i = 0; i < 100 && kinds.size() < 3; ++i) {
      if (quiet.socket.recv(part, ::zmq::recv_flags::dontwait))
        kinds.push_back(replication_record::decode(part.to_string_view(), 1 << 20).kind);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    BOOST_TEST_REQUIRE(kinds.size() >= 1u);
    BOOST_TEST((kinds[0] == replication_kind::snapshot));
    if (sync) BOOST_TEST((kinds.back() == replication_kind::dropped));
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_zeromq_replication_test
