// Writes the decode fuzzer's seed corpus into the directory given as the
// only argument: valid messages of every kind, sessions of one to three
// learners (joins, contributions that close rounds, heartbeats, timeouts,
// rejoins, leaves) and a message for each refusal reason, one file per seed in
// the input format of harness.hpp.
//
// Each seed is replayed through the fuzz harness here, and the syncer counters
// it must reach are checked: a seed that stopped reaching the syncer's deeper
// checks (after a layout or protocol change, say) fails the corpus build
// instead of silently weakening the fuzzer.
//
//   make_corpus seeds/
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "harness.hpp"

namespace {

using namespace diloco;
using fuzz::control::flush;
using fuzz::control::repair_checksums;

const parameter_layout layout = fuzz::make_layout();
const fragment_plan plan = fragment_plan::balanced(layout, fuzz::fragment_count);

using frame = std::vector<std::byte>;

/// A fuzz input under construction.
class input {
 public:
  explicit input(std::uint8_t config) { bytes_.push_back(config); }

  /// Learner `learner` (1 to 4) sends `h` and `payload` from its own peer.
  input& send(std::uint32_t learner, const message_header& h, std::span<const float> payload = {},
              std::uint8_t advance = 0, std::uint8_t extra = 0) {
    return from(learner - 1, h, payload, advance, extra);
  }

  /// Sends `h` and `payload` from peer index `peer` (see `fuzz::peers`).
  input& from(std::size_t peer, const message_header& h, std::span<const float> payload = {}, std::uint8_t advance = 0,
              std::uint8_t extra = 0) {
    const std::span<const std::byte> bytes = std::as_bytes(payload);
    const auto header = wire::encode_header(h, bytes);
    std::vector<frame> frames{frame(header.begin(), header.end())};
    if (!payload.empty()) frames.emplace_back(bytes.begin(), bytes.end());
    return raw(peer, frames, advance, extra);
  }

  /// Any frames from peer index `peer`; `extra` adds control bits.
  input& raw(std::size_t peer, const std::vector<frame>& frames, std::uint8_t advance = 0, std::uint8_t extra = 0) {
    bytes_.push_back(static_cast<std::uint8_t>(frames.size() | (peer << fuzz::control::peer_shift) | extra));
    bytes_.push_back(advance);
    for (const auto& f : frames) {
      const auto n = static_cast<std::uint32_t>(f.size());
      for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
      for (auto b : f) bytes_.push_back(static_cast<std::uint8_t>(b));
    }
    return *this;
  }

  /// The clock moves forward by `advance` × 50 ms: a message of no frames
  /// from an unattached peer (counted as a truncated message).
  input& wait(std::uint8_t advance) { return raw(5, {}, advance); }

  const std::vector<std::uint8_t>& bytes() const noexcept { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

std::uint8_t config(partial_rounds scaling, update_recipients recipients, std::uint32_t quorum) {
  const std::uint8_t s = scaling == partial_rounds::full_step ? 0 : scaling == partial_rounds::live_share ? 1 : 2;
  const std::uint8_t r = recipients == update_recipients::contributors ? 4 : 0;
  return static_cast<std::uint8_t>(s | r | ((quorum - 1) << 3));
}

// Messages of every kind, as docs/protocol.md describes them.

message_header join(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t sequence) {
  message_header h;
  h.kind = message_kind::join;
  h.learner = learner;
  h.incarnation = incarnation;
  h.sequence = sequence;
  h.layout = layout.fingerprint();
  h.element_count = layout.size();
  return h;
}

message_header welcome(std::uint32_t learner, std::uint32_t incarnation) {
  message_header h;
  h.kind = message_kind::welcome;
  h.learner = learner;
  h.incarnation = incarnation;
  h.layout = layout.fingerprint();
  h.element_count = layout.size();
  h.fragment_count = fuzz::fragment_count;
  h.sync_period = 4;
  h.overlap = 1;
  h.mixing = 0.5;
  h.lock_step = 1;
  return h;
}

/// Δ_p of learner `learner`: small values of both signs.
std::vector<float> delta(std::uint32_t learner, std::uint32_t fragment) {
  std::vector<float> d(plan[fragment].size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = 0.01f * float(i + 1) * (((i + learner) % 2) ? 1.0f : -1.0f);
  return d;
}

message_header contribution(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t sequence,
                            std::uint32_t fragment, std::uint64_t base, std::uint64_t steps = 4,
                            std::uint8_t flags = 0) {
  message_header h;
  h.kind = message_kind::contribution;
  h.codec = codec_id::f32;
  h.flags = flags;
  h.learner = learner;
  h.incarnation = incarnation;
  h.sequence = sequence;
  h.fragment = fragment;
  h.base_revision = base;
  h.tokens = 64 * steps;
  h.steps = steps;
  h.revision = steps + 100;  // the learner's local step
  h.element_count = plan[fragment].size();
  h.step_time_ns = 2'000'000;
  h.transfer_ns = 300'000;
  return h;
}

message_header update(std::uint32_t learner, std::uint32_t incarnation, std::uint32_t fragment, std::uint64_t revision,
                      std::uint64_t answers) {
  message_header h;
  h.kind = message_kind::update;
  h.codec = codec_id::f32;
  h.status = answers ? update_status::merged : update_status::resync;
  h.learner = learner;
  h.incarnation = incarnation;
  h.fragment = fragment;
  h.revision = revision;
  h.answers = answers;
  h.hold_ns = 1'500'000;
  h.element_count = plan[fragment].size();
  return h;
}

message_header heartbeat(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t sequence, std::uint64_t step,
                         std::int64_t step_time_ns = 20'000'000) {
  message_header h;
  h.kind = message_kind::heartbeat;
  h.learner = learner;
  h.incarnation = incarnation;
  h.sequence = sequence;
  h.tokens = 64 * step;
  h.steps = step;
  h.step_time_ns = step_time_ns;
  h.transfer_ns = 1'000'000;
  return h;
}

message_header leave(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t sequence) {
  message_header h;
  h.kind = message_kind::leave;
  h.learner = learner;
  h.incarnation = incarnation;
  h.sequence = sequence;
  return h;
}

message_header verdict(message_kind kind, std::uint32_t learner, std::uint32_t fragment, std::uint64_t base,
                       std::uint64_t answers, reject_reason why = reject_reason::none) {
  message_header h;
  h.kind = kind;
  h.learner = learner;
  h.incarnation = 1;
  h.fragment = fragment;
  h.base_revision = base;
  h.answers = answers;
  h.reason = kind == message_kind::reject ? static_cast<std::uint8_t>(why) : 0;
  return h;
}

frame header_bytes(const message_header& h, std::span<const std::byte> payload = {}) {
  const auto bytes = wire::encode_header(h, payload);
  return frame(bytes.begin(), bytes.end());
}

struct seed {
  std::string name;
  input in;
  /// What the syncer's counters must show after the seed; empty if nothing.
  std::function<bool(const syncer_metrics&)> expect;
};

std::uint64_t refused(const syncer_metrics& m, reject_reason r) { return m.rejected_for(r); }

std::vector<seed> seeds() {
  std::vector<seed> s;
  const auto base_config = config(partial_rounds::all_share, update_recipients::live_learners, 1);
  const std::vector<float> d0 = delta(1, 0), d1 = delta(1, 1), e0 = delta(2, 0), e1 = delta(2, 1);
  const std::vector<float> g0 = delta(3, 0);

  // One message of every kind.
  s.push_back({"join", input(base_config).send(1, join(1, 1, 1)),
               [](const syncer_metrics& m) { return m.joins == 1 && m.rejected_total() == 0; }});
  s.push_back({"contribution", input(base_config).send(1, contribution(1, 1, 2, 0, 0), d0),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unknown_learner) == 1; }});
  s.push_back({"heartbeat", input(base_config).send(1, heartbeat(1, 1, 2, 10)),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unknown_learner) == 1; }});
  s.push_back({"leave", input(base_config).send(1, leave(1, 1, 2)),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unknown_learner) == 1; }});
  s.push_back({"welcome", input(base_config).from(7, welcome(1, 1)),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unexpected_kind) == 1; }});
  s.push_back({"update", input(base_config).from(7, update(1, 1, 1, 3, 7), d1),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unexpected_kind) == 1; }});
  s.push_back({"ack", input(base_config).from(7, verdict(message_kind::ack, 1, 0, 2, 5)),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unexpected_kind) == 1; }});
  s.push_back({"reject", input(base_config).from(7, verdict(message_kind::reject, 1, 1, 0, 6, reject_reason::stale)),
               [](const syncer_metrics& m) { return refused(m, reject_reason::unexpected_kind) == 1; }});

  // One learner: each contribution closes its round at once.
  s.push_back({"one_learner",
               input(base_config)
                   .send(1, join(1, 1, 1))
                   .send(1, heartbeat(1, 1, 2, 1), {}, 2)
                   .send(1, contribution(1, 1, 3, 0, 0), d0, 1)
                   .send(1, contribution(1, 1, 4, 1, 0), d1, 1)
                   .send(1, contribution(1, 1, 5, 0, 1), d0, 4)
                   .send(1, contribution(1, 1, 6, 1, 1, 2, final_contribution), d1, 1)
                   .send(1, leave(1, 1, 7)),
               [](const syncer_metrics& m) {
                 return m.contributions_accepted == 4 && m.outer_updates == 4 && m.leaves == 1 &&
                        m.rejected_total() == 0;
               }});

  // Two learners, quorum 2, under each scaling rule and both recipient sets:
  // rounds close when both are in, or when one has left; a silent learner is
  // declared dead and revives; a restart rejoins with a new incarnation.
  for (auto scaling : {partial_rounds::full_step, partial_rounds::live_share, partial_rounds::all_share}) {
    for (auto recipients : {update_recipients::live_learners, update_recipients::contributors}) {
      const std::string name = std::string("two_learners_") +
                               (scaling == partial_rounds::full_step    ? "full_step"
                                : scaling == partial_rounds::live_share ? "live_share"
                                                                        : "all_share") +
                               (recipients == update_recipients::contributors ? "_contributors" : "_live");
      s.push_back({name,
                   input(config(scaling, recipients, 2))
                       .send(1, join(1, 1, 1))
                       .send(2, join(2, 1, 1), {}, 1)
                       .send(1, contribution(1, 1, 2, 0, 0), d0, 1)
                       .send(2, contribution(2, 1, 2, 0, 0), e0, 1)
                       .send(2, contribution(2, 1, 3, 1, 0, 3), e1, 1)
                       .send(1, contribution(1, 1, 3, 1, 0), d1, 1)
                       .send(1, contribution(1, 1, 4, 0, 1, 2, final_contribution), d0, 2)
                       .send(1, leave(1, 1, 5))
                       .send(2, heartbeat(2, 1, 4, 9), {}, 1)
                       .wait(250)
                       .send(2, heartbeat(2, 1, 5, 9), {}, 1)
                       .send(2, contribution(2, 1, 6, 0, 1), e0, 1)
                       .send(2, join(2, 2, 1), {}, 4)
                       .send(2, contribution(2, 2, 2, 1, 1), e1, 1),
                   [](const syncer_metrics& m) {
                     return m.joins == 2 && m.rejoins == 1 && m.leaves == 1 && m.declared_dead >= 1 && m.revived >= 1 &&
                            m.contributions_accepted == 7 && m.outer_updates >= 4;
                   }});
    }
  }

  // Three learners, quorum 2: the third is slow, so a round closes when its
  // grace window ends (polled), or at a flush.
  s.push_back({"grace_window",
               input(config(partial_rounds::all_share, update_recipients::live_learners, 2))
                   .send(1, join(1, 1, 1))
                   .send(2, join(2, 1, 1))
                   .send(3, join(3, 1, 1))
                   .send(1, heartbeat(1, 1, 2, 5, 400'000'000), {}, 1)
                   .send(1, contribution(1, 1, 3, 0, 0), d0, 1)
                   .send(2, contribution(2, 1, 2, 0, 0), e0, 1)
                   .wait(30)
                   .send(3, contribution(3, 1, 2, 0, 1), g0, 1)
                   .send(1, contribution(1, 1, 4, 1, 0), d1, 1, flush),
               [](const syncer_metrics& m) { return m.contributions_accepted == 4 && m.outer_updates == 3; }});

  // Every refusal of the identity and contribution checks.
  {
    auto bad_count = contribution(1, 1, 9, 0, 1);
    bad_count.element_count = plan[0].size() - 1;
    const std::vector<float> short_delta(plan[0].size() - 1, 0.5f);
    auto f64 = contribution(1, 1, 10, 0, 1);
    f64.codec = codec_id::f64;
    const std::vector<float> f64_payload(2 * plan[0].size(), 0.0f);  // the bytes of plan[0].size() doubles
    auto other_layout = join(4, 1, 1);
    other_layout.layout ^= 1;
    auto no_such_fragment = contribution(1, 1, 7, 0, 0);
    no_such_fragment.fragment = fuzz::fragment_count;
    s.push_back({"refusals",
                 input(config(partial_rounds::live_share, update_recipients::contributors, 1))
                     .send(1, join(1, 1, 1))
                     .send(1, contribution(1, 1, 2, 0, 0), d0)
                     .send(1, contribution(1, 1, 3, 0, 0), d0)     // duplicate
                     .send(1, contribution(1, 1, 4, 1, 5), d1)     // future_base
                     .send(1, contribution(1, 1, 5, 0, 0, 0), d0)  // no_work (and duplicate key)
                     .send(1, contribution(1, 1, 6, 1, 0, 0), d1)  // no_work
                     .send(1, no_such_fragment, d0)                // bad_fragment
                     .send(1, bad_count, short_delta)              // bad_size
                     .send(1, f64, f64_payload)                    // bad_codec
                     .send(1, contribution(1, 1, 11, 0, 1), d0)
                     .send(1, contribution(1, 1, 12, 0, 2), d0)
                     .send(1, contribution(1, 1, 13, 0, 3), d0)
                     .send(1, contribution(1, 1, 14, 0, 1), d0)  // stale
                     .send(2, heartbeat(1, 1, 15, 3))            // wrong_peer
                     .send(1, heartbeat(1, 2, 1, 3))             // unknown_incarnation
                     .send(4, other_layout)                      // layout_mismatch
                     .send(1, join(1, 2, 1), {}, 1)              // rejoin
                     .send(1, heartbeat(1, 1, 16, 3))            // dead_incarnation
                     .send(1, leave(1, 2, 2))
                     .send(1, heartbeat(1, 2, 3, 3)),  // dead_incarnation
                 [](const syncer_metrics& m) {
                   for (auto r : {reject_reason::duplicate, reject_reason::future_base, reject_reason::no_work,
                                  reject_reason::bad_fragment, reject_reason::bad_size, reject_reason::bad_codec,
                                  reject_reason::stale, reject_reason::wrong_peer, reject_reason::unknown_incarnation,
                                  reject_reason::layout_mismatch, reject_reason::dead_incarnation})
                     if (refused(m, r) == 0) return false;
                   return m.contributions_accepted == 4 && m.rejoins == 1 && m.leaves == 1;
                 }});
  }

  // Every way a message fails to decode.
  {
    const auto good = header_bytes(heartbeat(1, 1, 1, 1));
    auto bad_magic = good;
    bad_magic[0] = std::byte{'X'};
    auto bad_version = good;
    bad_version[wire::offset::version] = std::byte{2};
    auto bad_checksum = good;
    bad_checksum[wire::offset::sequence] ^= std::byte{1};
    auto bad_kind = good;  // sent with repaired checksums
    bad_kind[wire::offset::kind] = std::byte{9};
    auto huge = contribution(1, 1, 2, 0, 0);
    huge.element_count = std::uint64_t{1} << 40;
    const auto d0_bytes = std::as_bytes(std::span<const float>(d0));
    const auto payload = frame(d0_bytes.begin(), d0_bytes.end());
    const auto contribution_header = header_bytes(contribution(1, 1, 2, 0, 0), d0_bytes);
    auto flipped = payload;
    flipped[3] ^= std::byte{0x40};
    s.push_back({"undecodable",
                 input(base_config)
                     .raw(0, {})
                     .raw(0, {good, frame{}, frame{}})
                     .raw(0, {frame(good.begin(), good.end() - 1)})
                     .raw(0, {bad_magic})
                     .raw(0, {bad_version})
                     .raw(0, {bad_checksum})
                     .raw(0, {bad_kind}, 0, repair_checksums)
                     .raw(0, {header_bytes(huge)})
                     .raw(0, {contribution_header})
                     .raw(0, {contribution_header, frame(payload.begin(), payload.end() - 4)})
                     .raw(0, {contribution_header, flipped}),
                 [](const syncer_metrics& m) {
                   return refused(m, reject_reason::truncated) == 5 && refused(m, reject_reason::bad_magic) == 1 &&
                          refused(m, reject_reason::bad_version) == 1 && refused(m, reject_reason::bad_checksum) == 2 &&
                          refused(m, reject_reason::bad_header) == 1 && refused(m, reject_reason::oversized) == 1;
                 }});
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus <directory>\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  int failures = 0;
  const auto all = seeds();
  for (const auto& s : all) {
    const auto& bytes = s.in.bytes();
    const auto m = fuzz::harness::run(bytes.data(), bytes.size());
    if (s.expect && !s.expect(m)) {
      std::fprintf(
          stderr, "make_corpus: seed %s does not do what it should (accepted %llu, updates %llu, refused %llu)\n",
          s.name.c_str(), static_cast<unsigned long long>(m.contributions_accepted),
          static_cast<unsigned long long>(m.outer_updates), static_cast<unsigned long long>(m.rejected_total()));
      ++failures;
    }
    std::ofstream out(dir / s.name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "make_corpus: cannot write %s\n", (dir / s.name).c_str());
      ++failures;
    }
  }
  if (failures) return 1;
  std::printf("make_corpus: %zu seeds in %s\n", all.size(), dir.c_str());
  return 0;
}
