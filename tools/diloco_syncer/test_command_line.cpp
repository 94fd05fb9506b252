// ctest-labels: unit
// diloco_syncer's command line: its defaults (those docs/design.md gives:
// H = 50, P = 8, K = 1, τ = H/10, Decoupled DiLoCo's outer step η = 1,
// μ = 0.5 and DiLoCo's η = 0.7, μ = 0.9 when lock-step), values read into
// the syncer's options, and bad ones refused with exit status 2 and a
// message naming the flag.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <initializer_list>

#include <diloco_tools/command_line_test.hpp>

#include "command_line.hpp"

namespace {

namespace dt = diloco_tools::testing;
using parsed = dt::parsed<diloco_syncer::settings>;
using dt::refused;

parsed parse(std::initializer_list<const char*> args) {
  return dt::parse_words<diloco_syncer::settings>(diloco_syncer::parse_command_line, "diloco_syncer", args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(syncer_command_line)

BOOST_AUTO_TEST_CASE(defaults) {
  const auto p = parse({});
  BOOST_TEST_REQUIRE(!p.status.has_value());
  const auto& s = p.c;
  const auto& t = s.options.training;
  BOOST_TEST(s.endpoint == "tcp://127.0.0.1:5555");
  BOOST_TEST(t.sync_period == 50u);
  BOOST_TEST(t.fragments == 8u);
  BOOST_TEST(t.overlap == 5u);  // H / 10
  BOOST_TEST(s.options.quorum == 1u);
  BOOST_TEST(!t.lock_step);
  BOOST_TEST(s.outer == "nesterov");
  BOOST_TEST(*s.outer_lr == 1.0);
  BOOST_TEST(*s.outer_momentum == 0.5);
  BOOST_TEST(s.merge == "tokens");
  BOOST_TEST(!s.metrics_port.has_value());
  BOOST_TEST(s.durability_seconds == 0.0);  // before every published update
  BOOST_TEST(s.options.shard.index == 0u);
  BOOST_TEST(s.options.shard.count == 1u);
  BOOST_TEST(s.learners == 0u);
}

BOOST_AUTO_TEST_CASE(reads_what_it_is_given) {
  const auto p =
      parse({"--H", "120", "--fragments", "3", "--lock-step", "--shard", "2/5", "--metrics-port", "0", "--durability",
             "30", "--world-size", "4", "--heartbeat-timeout", "2.5", "--merge", "average", "--learners", "6"});
  BOOST_TEST_REQUIRE(!p.status.has_value());
  const auto& s = p.c;
  const auto& o = s.options;
  BOOST_TEST(o.training.sync_period == 120u);
  BOOST_TEST(o.training.fragments == 3u);
  BOOST_TEST(o.training.overlap == 12u);  // H / 10
  BOOST_TEST(o.training.lock_step);
  BOOST_TEST(*s.outer_lr == 0.7);  // DiLoCo's outer step when lock-step
  BOOST_TEST(*s.outer_momentum == 0.9);
  BOOST_TEST(o.shard.index == 2u);
  BOOST_TEST(o.shard.count == 5u);
  BOOST_TEST_REQUIRE(s.metrics_port.has_value());
  BOOST_TEST(*s.metrics_port == 0u);
  BOOST_TEST(s.durability_seconds == 30.0);
  BOOST_TEST(o.world.size == 4u);
  BOOST_TEST(o.quorum == 4u);  // a fixed world waits for all of it
  BOOST_TEST((o.heartbeat_timeout == std::chrono::milliseconds(2500)));
  BOOST_TEST(s.merge == "average");
  BOOST_TEST(o.end.expected_learners == 6u);
}

BOOST_AUTO_TEST_CASE(an_explicit_overlap_is_kept) {
  const auto p = parse({"--H", "120", "--overlap", "3"});
  BOOST_TEST_REQUIRE(!p.status.has_value());
  BOOST_TEST(p.c.options.training.overlap == 3u);
}

BOOST_AUTO_TEST_CASE(leadership_in_etcd_is_off_unless_asked_for) {
  BOOST_TEST(parse({}).c.etcd.empty());
  BOOST_TEST(parse({}).c.leader_key.empty());
  // The key names the shard unless given.
  const auto p = parse({"--etcd", "http://127.0.0.1:2379", "--shard", "1/2", "--lease-ttl", "3"});
  BOOST_TEST_REQUIRE(!p.status.has_value());
  BOOST_TEST(p.c.etcd == "http://127.0.0.1:2379");
  BOOST_TEST(p.c.leader_key == "/diloco/shard-1/leader");
  BOOST_TEST(p.c.lease_ttl == 3u);
  BOOST_TEST(parse({"--etcd", "http://e:2379", "--leader-key", "/run7/leader"}).c.leader_key == "/run7/leader");
  BOOST_TEST(parse({}).c.lease_ttl == 5u);
  // Replication: synchronous unless asked, 2 s for a standby's answer.
  BOOST_TEST(parse({}).c.replication_endpoint.empty());
  const auto r = parse({"--etcd", "http://e:2379", "--checkpoint-dir", "/tmp/c", "--replication-endpoint",
                        "tcp://127.0.0.1:6000", "--replication", "async", "--replication-timeout", "0.5"});
  BOOST_TEST_REQUIRE(!r.status.has_value());
  BOOST_TEST(r.c.replication_endpoint == "tcp://127.0.0.1:6000");
  BOOST_TEST(r.c.replication_async);
  BOOST_TEST(r.c.replication_timeout == 0.5);
  BOOST_TEST(!parse({}).c.replication_async);
  BOOST_TEST(parse({}).c.replication_timeout == 2.0);
}

BOOST_AUTO_TEST_CASE(help_ends_with_status_zero) {
  const auto p = parse({"--help"});
  BOOST_TEST((p.status == 0));
  BOOST_TEST(p.output.find("--metrics-port") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(refuses_bad_values_with_status_two) {
  BOOST_TEST(refused(parse({"--fragments", "0"}), "--fragments"));
  BOOST_TEST(refused(parse({"--H", "-1"}), "--H"));
  BOOST_TEST(refused(parse({"--alpha", "1"}), "--alpha"));
  BOOST_TEST(refused(parse({"--metrics-port", "65536"}), "--metrics-port"));
  BOOST_TEST(refused(parse({"--metrics-port", "-1"}), "--metrics-port"));
  BOOST_TEST(refused(parse({"--heartbeat-timeout", "nan"}), "--heartbeat-timeout"));
  BOOST_TEST(refused(parse({"--clip", "0.5"}), "must be 0 (off) or at least 1"));
  BOOST_TEST(refused(parse({"--durability", "soon"}), "takes 'update' or a number of seconds"));
  BOOST_TEST(refused(parse({"--shard", "4/4"}), "expected S/N with 0 <= S < N"));
  BOOST_TEST(refused(parse({"--codec", "fp16"}), "--codec"));
  BOOST_TEST(refused(parse({"--outer", "adam"}), "--outer"));
  BOOST_TEST(refused(parse({"--curve-secret", "syncer.key"}), "--curve-secret and --allow go together"));
  BOOST_TEST(refused(parse({"--no-such-flag"}), "--no-such-flag"));
  BOOST_TEST(refused(parse({"--etcd", "127.0.0.1:2379"}), "expected http://HOST:PORT"));
  BOOST_TEST(refused(parse({"--etcd", "http://127.0.0.1:2379", "--lease-ttl", "0"}), "--lease-ttl"));
  BOOST_TEST(refused(parse({"--leader-key", "/k"}), "--leader-key needs --etcd"));
  BOOST_TEST(refused(parse({"--replication-endpoint", "tcp://127.0.0.1:6000", "--checkpoint-dir", "/tmp/c"}),
                     "--replication-endpoint needs --etcd"));
  BOOST_TEST(refused(parse({"--replication-endpoint", "tcp://127.0.0.1:6000", "--etcd", "http://e:2379"}),
                     "--replication-endpoint needs --etcd"));
  BOOST_TEST(refused(parse({"--replication", "semi"}), "--replication"));
  BOOST_TEST(refused(parse({"--replication-timeout", "0"}), "--replication-timeout"));
}

BOOST_AUTO_TEST_SUITE_END()
