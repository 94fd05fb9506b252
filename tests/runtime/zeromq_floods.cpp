// ctest-labels: zeromq slow threads
// ctest-timeout: 300
// Peers that try to exhaust the syncer's memory over real ZeroMQ TCP
// loopback sockets, while an honest learner trains against it
// (tests/support/adversary_harness.hpp): 1 500 connections that each
// announce a 1 GiB payload, send one byte and leave; and three learners that
// join and never read what the syncer sends them. The syncer's transport
// holds what has arrived of an unfinished message, not what it announces,
// and everything its peers make it hold shares one budget
// (`socket_options::memory_bytes`, 256 MiB by default; docs/protocol.md,
// "Framing"). The process — syncer, honest learner and attackers together —
// stays under 512 MiB resident, and the honest learner is served.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/adversary_harness.hpp"

namespace runtime_zeromq_floods_test {

using namespace adversary;

constexpr long rss_bound_kib = 512 * 1024;

BOOST_AUTO_TEST_SUITE(runtime_zeromq_floods)

// 1 500 DEALER connections, opened and closed one after the other while the
// honest learner trains: a header announcing 2^30 − 4 bytes of a
// contribution (the most the 1 GiB limit allows in f32), one byte, close.
// Each holds a page until `partial_timeout` (30 s, beyond the run): libzmq
// tells of no closed connection. None is ever completed, so the run is the
// clean one to the bit. (Before messages grew as they arrived, each reserved
// its announced size and touched a 2 MiB huge page: 3 GB for the 1 500.)
BOOST_AUTO_TEST_CASE(unfinished_gigabyte_messages_hold_what_arrived) {
  harness h(run_settings{.step_pause = 3ms});  // ~2.5 s of training: the attack falls within it
  constexpr int attackers = 1500;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 20; }, 20s));
    x.attack_began();
    message big = make(message_kind::contribution, 4242, 1, 1);
    big.header.codec = codec_id::f32;
    big.header.element_count = (std::uint64_t{1} << 28) - 1;
    big.header.steps = 10;
    big.header.tokens = 160;
    const auto header = wire::encode_header(big.header, {});
    const std::byte one{1};
    ::zmq::context_t attackers_context;
    attackers_context.set(::zmq::ctxopt::max_sockets, 2 * attackers);
    for (int i = 0; i < attackers; ++i) {
      ::zmq::socket_t s(attackers_context, ::zmq::socket_type::dealer);
      s.set(::zmq::sockopt::linger, 5000);  // closed at once; libzmq still delivers what it holds
      s.connect(x.endpoint());
      (void)s.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
      (void)s.send(::zmq::buffer(&one, 1), ::zmq::send_flags::none);
      s.close();
    }
    x.attack_ended();
  });
  report("1500 unfinished 1 GiB messages", o);
  BOOST_TEST_MESSAGE("  peak held for unfinished messages " << o.peak_unfinished_bytes << " bytes, evicted "
                                                            << o.messages_evicted);
  check_served(o, 0);  // the attack lasts a fraction of a second
  check_unchanged(o);
  BOOST_TEST(o.peak_unfinished_bytes <= std::uint64_t{attackers} * (4096 + 256));  // a page and its bookkeeping each
  if (o.peak_measured && process_memory::rss_measures_the_program) BOOST_TEST(o.rss_peak_kib < rss_bound_kib);
  if (process_memory::rss_measures_the_program) BOOST_TEST(o.rss_after_kib < rss_bound_kib);
}

// A model of 2^18 parameters (1 MiB per update). Three learners join
// and never read: every 20 ms each joins again, as a learner may, and each
// join is answered with a welcome and the whole model — 1 MiB for a 144-byte
// message, 150 MiB a second for the three. Their own sockets buffer one
// message each, so what piles up is the syncer's: its queues stop at the
// budget, 256 MiB, plus one message per peer, and past it sends to them are
// refused (`sends_over_budget`; the syncer counts `send_failures`). The
// honest learner, which reads, gets every revision. (Before the budget, each
// peer could queue 1 GiB.)
BOOST_AUTO_TEST_CASE(learners_that_never_read_fill_the_budget_not_the_memory) {
  constexpr std::size_t big = (std::size_t{1} << 18) - 1;  // features; and a bias
  harness h(run_settings{.features = big, .steps = 100});
  const std::uint64_t budget = zeromq::socket_options{}.memory_bytes;
  const std::uint64_t update_bytes = (big + 1) * sizeof(T) + wire::header_size;
  const auto o = h.run([&](harness& x) {
    zeromq::socket_options tiny = quick_close();
    tiny.queue_bytes = 1 << 20;  // a receive high-water mark of one message
    std::vector<std::unique_ptr<peer>> silent;
    for (std::uint32_t i = 0; i < 3; ++i) silent.push_back(std::make_unique<peer>(x.context(), x.endpoint(), tiny));
    x.start_learner();
    x.attack_began();
    const auto end = steady::now() + 120s;
    while (!x.honest_done() && steady::now() < end) {
      for (std::uint32_t i = 0; i < 3; ++i) BOOST_TEST_REQUIRE(silent[i]->send(silent[i]->join(500 + i, 1, big)));
      std::this_thread::sleep_for(20ms);
    }
    x.attack_ended();
  });
  report("three learners that never read", o);
  BOOST_TEST_MESSAGE("  peak queued " << o.peak_queued_bytes << " bytes (budget " << budget << "), sends refused for "
                                      << "the budget " << o.sends_over_budget << ", send failures "
                                      << o.metrics.send_failures);
  check_served(o, 5);
  BOOST_TEST(o.honest.updates_adopted >= o.metrics.outer_updates - 1);  // every revision but perhaps the last
  BOOST_TEST(o.peak_queued_bytes <= budget + 4 * update_bytes);
  BOOST_TEST(o.sends_over_budget > 0u);
  if (o.peak_measured && process_memory::rss_measures_the_program) BOOST_TEST(o.rss_peak_kib < rss_bound_kib);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_zeromq_floods_test
