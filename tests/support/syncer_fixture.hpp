// A syncer on the in-process transport, driven message by message with
// hand-made joins, contributions and heartbeats (tests/runtime/syncer.cpp and
// tests/runtime/screening.cpp), and a scratch directory for the journal's tests.
#pragma once

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>

namespace syncer_test {

using namespace std::chrono_literals;
using namespace diloco;

/// Outer SGD with η = 1 and plain averaging, so every merge is
/// `Θ ← Θ − mean(Δ)` and can be checked by hand.
using test_syncer = syncer<outer::sgd<double>, merge::average, inproc::endpoint>;

struct fixture {
  parameter_layout layout;
  std::vector<double> initial{1, 2, 3, 4, 5, 6};
  inproc::hub hub;
  inproc::endpoint& syncer_end = hub.attach(syncer_peer);
  std::vector<inproc::endpoint*> ends;
  time_point now{};

  fixture() {
    layout.add("w", 4);
    layout.add("b", 2);
    for (std::uint32_t i = 0; i < 5; ++i) ends.push_back(&hub.attach(i));
  }

  static syncer_options options(std::uint32_t quorum = 1) {
    syncer_options o;
    o.training = training_config{.fragments = 1, .sync_period = 10, .overlap = 0, .mixing = 0.0, .lock_step = false};
    o.quorum = quorum;
    o.grace_factor = 0.0;
    o.log = [](const std::string&) {};
    return o;
  }

  template <class Syncer>
  void deliver(Syncer& s) {
    while (auto e = syncer_end.try_receive()) s.handle(std::move(*e), now);
  }

  std::vector<message> inbox(std::uint32_t i) {
    std::vector<message> got;
    while (auto e = ends[i]->try_receive()) got.push_back(std::move(e->msg));
    return got;
  }

  static std::vector<message> of_kind(std::vector<message>&& all, message_kind kind) {
    std::vector<message> got;
    for (auto& m : all)
      if (m.header.kind == kind) got.push_back(std::move(m));
    return got;
  }

  void send(std::uint32_t from_endpoint, message m) {
    BOOST_TEST_REQUIRE(!ends[from_endpoint]->try_send(syncer_peer, m));
  }

  message join(std::uint32_t id, std::uint32_t incarnation = 1) {
    message m;
    m.header.kind = message_kind::join;
    m.header.learner = id;
    m.header.incarnation = incarnation;
    m.header.layout = layout.fingerprint();
    m.header.element_count = layout.size();
    return m;
  }

  message contribution(std::uint32_t id, std::vector<double> delta, std::uint64_t base = 0,
                       std::uint32_t incarnation = 1, std::uint64_t sequence = 1) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::contribution;
    h.codec = codec_id::f64;
    h.learner = id;
    h.incarnation = incarnation;
    h.fragment = 0;
    h.base_revision = base;
    h.sequence = sequence;
    h.tokens = 640;
    h.steps = 10;
    h.revision = 1000;  // the learner's local step
    h.element_count = delta.size();
    m.payload = byte_buffer(delta.size() * sizeof(double));
    std::copy(delta.begin(), delta.end(), m.payload.as<double>().begin());
    return m;
  }

  static message leave(std::uint32_t id, std::uint32_t incarnation = 1) {
    message m;
    m.header.kind = message_kind::leave;
    m.header.learner = id;
    m.header.incarnation = incarnation;
    return m;
  }

  message heartbeat(std::uint32_t id, std::chrono::nanoseconds step_time = 0ns) {
    message m;
    m.header.kind = message_kind::heartbeat;
    m.header.learner = id;
    m.header.incarnation = 1;
    m.header.step_time_ns = step_time.count();
    return m;
  }

  template <class Syncer>
  void join_all(Syncer& s, std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) send(i, join(i));
    deliver(s);
    for (std::uint32_t i = 0; i < n; ++i) inbox(i);
  }

  /// Learners 0 … n−1 each contribute Δ = 0 once (sequence 100 + i), one
  /// round each: afterwards every one has an expected weight (a learner that
  /// never contributed counts for nothing), Θ is unchanged and the revision
  /// is n.
  template <class Syncer>
  void contribute_zero_once(Syncer& s, std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      send(i, contribution(i, std::vector<double>(6, 0.0), s.revision(0), 1, 100 + i));
      while (auto e = syncer_end.try_receive()) s.handle(std::move(*e), now);
    }
    BOOST_TEST_REQUIRE(s.revision(0) == n);
    for (std::uint32_t i = 0; i < n; ++i) inbox(i);
  }
};

inline std::vector<double> values(const message& m) {
  const auto v = m.payload.as<const double>();
  return {v.begin(), v.end()};
}

/// A fresh directory, removed afterwards.
struct scratch_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("diloco-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
  scratch_dir() { std::filesystem::create_directories(path); }
  ~scratch_dir() { std::filesystem::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

/// Θ − mean(Δ), element by element: one merge of plain averaging and outer SGD with η = 1, computed by hand.
inline std::vector<double> minus_mean(std::vector<double> theta, const std::vector<std::vector<double>>& deltas) {
  for (std::size_t i = 0; i < theta.size(); ++i) {
    double sum = 0;
    for (const auto& d : deltas) sum += d[i];
    theta[i] -= sum / double(deltas.size());
  }
  return theta;
}

}  // namespace syncer_test
