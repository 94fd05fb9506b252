// A learner that does no training: it speaks the protocol (docs/protocol.md,
// "Session" and "Sharded syncers") to every shard through
// `diloco::sharded<diloco::zeromq::client>`, as a real learner does, but its
// contributions are pre-computed. Each fragment has at most one contribution
// in flight, against the newest revision the learner holds (the syncer takes
// one contribution per learner and base revision); the next one leaves as
// soon as the update that merged it arrives. So the syncer, not the
// learners' compute, sets the pace.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/protocol/wire.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>

namespace bench {

/// The model every learner announces: P tensors of equal size, so that the
/// balanced plan makes P fragments of exactly `elements / P` values each and
/// merged bytes are contributions merged × one fragment's bytes.
inline diloco::parameter_layout equal_fragments(std::size_t elements, std::uint32_t fragments) {
  if (fragments == 0 || elements % fragments != 0) throw std::invalid_argument("parameters must be a multiple of P");
  diloco::parameter_layout layout;
  for (std::uint32_t p = 0; p < fragments; ++p) layout.add("layer" + std::to_string(p), elements / fragments);
  return layout;
}

struct learner_counts {
  std::uint64_t sent = 0;      ///< contributions handed to the transport
  std::uint64_t answered = 0;  ///< updates that merged one of ours
  std::uint64_t rejected = 0;  ///< rejects received (any reason)
  std::uint64_t states_sent = 0;
  std::vector<double> ack_us;  ///< per acknowledged contribution: microseconds from its send to its ack
};

class synthetic_learner {
 public:
  using clock = std::chrono::steady_clock;

  synthetic_learner(::zmq::context_t& context, const std::vector<std::string>& endpoints, std::uint32_t id,
                    const diloco::parameter_layout& layout, std::uint32_t fragments, std::uint32_t sync_period)
      : id_(id), layout_(layout), plan_(diloco::fragment_plan::balanced(layout, fragments)), period_(sync_period) {
    diloco::zeromq::socket_options o;
    o.message_bytes = plan_[0].size() * sizeof(float);
    o.linger = std::chrono::milliseconds(0);  // nothing of ours matters once the bench stops
    std::vector<diloco::zeromq::client*> raw;
    for (const auto& e : endpoints) {
      connections_.push_back(std::make_unique<diloco::zeromq::client>(context, e, id, 1, o));
      raw.push_back(connections_.back().get());
    }
    link_ = std::make_unique<diloco::sharded<diloco::zeromq::client>>(std::move(raw));
    revision_.assign(fragments, 0);
    in_flight_.assign(fragments, 0);
    sent_at_.assign(fragments, clock::time_point{});
  }

  /// Joins every shard (answering a bootstrap's request for the model);
  /// false if not done by `deadline` or `stop`.
  bool join(clock::time_point deadline, const std::atomic<bool>& stop) {
    clock::time_point last_join{};
    while (!joined()) {
      if (stop.load() || clock::now() > deadline) return false;
      // Repeated until welcomed, every 10 s rather than a learner's 1 s: each
      // repeat is answered with the whole model again, which a busy syncer
      // would then spend the measurement sending.
      if (clock::now() - last_join > std::chrono::seconds(10)) {
        auto m = next(diloco::message_kind::join);
        m.header.layout = layout_.fingerprint();
        m.header.element_count = layout_.size();
        send(m);
        last_join = clock::now();
      }
      receive(std::chrono::milliseconds(5));
    }
    return true;
  }

  /// Streams contributions until `stop`, then leaves.
  void stream(const std::atomic<bool>& stop) {
    clock::time_point last_beat = clock::now();
    while (!stop.load()) {
      for (std::uint32_t p = 0; p < plan_.count(); ++p)
        if (!in_flight_[p]) contribute(p);
      receive(std::chrono::milliseconds(1));
      if (clock::now() - last_beat > std::chrono::milliseconds(200)) {
        auto beat = next(diloco::message_kind::heartbeat);
        beat.header.steps = local_step_;
        send(beat);
        last_beat = clock::now();
      }
    }
    auto bye = next(diloco::message_kind::leave);
    send(bye);
    receive(std::chrono::milliseconds(0));  // flushes what a connection still holds
  }

  bool joined() const {
    for (std::uint32_t p = 0; p < plan_.count(); ++p)
      if (!link_->owner_of(p)) return false;
    return true;
  }
  const learner_counts& counts() const noexcept { return counts_; }
  diloco::shard_error shard_error() const { return link_->error(); }
  bool ended() const noexcept { return ended_; }

 private:
  diloco::message next(diloco::message_kind kind) {
    diloco::message m;
    m.header.kind = kind;
    m.header.learner = id_;
    m.header.incarnation = 1;
    m.header.sequence = ++sequence_;
    return m;
  }

  void send(diloco::message& m) {
    // `sharded` keeps what a connection refuses and sends it first next time.
    if (auto ec = link_->try_send(diloco::syncer_peer, m); ec && ec != diloco::errc::unknown_peer)
      throw std::runtime_error("learner " + std::to_string(id_) + ": send: " + ec.message());
  }

  /// One contribution of fragment p against the newest revision held. Its
  /// payload is written only when the pool allocates a new block: the values
  /// are the same in every contribution, and blocks come back from the
  /// transport unchanged once sent (at most P are in flight, fewer than the
  /// pool caches).
  void contribute(std::uint32_t p) {
    if (!link_->owner_of(p)) return;
    const std::size_t n = plan_[p].size();
    auto m = next(diloco::message_kind::contribution);
    local_step_ += period_;
    auto& h = m.header;
    h.codec = diloco::codec_id::f32;
    h.fragment = p;
    h.base_revision = revision_[p];
    h.steps = period_;
    h.tokens = std::uint64_t{period_} * 16;  // 16 examples per inner step
    h.revision = local_step_;
    h.element_count = n;
    const auto before = pool_.allocations();
    m.payload = pool_.acquire(n * sizeof(float));
    if (pool_.allocations() != before) {
      // Small outer gradients: the Nesterov steps they cause stay far from
      // the syncer's bounds however long the run.
      auto values = m.payload.as<float>();
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1e-6f * static_cast<float>(i % 7 + 1);
    }
    const auto sequence = h.sequence;
    sent_at_[p] = clock::now();
    send(m);
    in_flight_[p] = sequence;
    ++counts_.sent;
  }

  void receive(std::chrono::milliseconds wait) {
    for (auto e = link_->receive_for(wait); e; e = link_->try_receive()) handle(*e);
  }

  void handle(const diloco::envelope& e) {
    if (e.error != diloco::wire_error::none) throw std::runtime_error("learner: a damaged message from a shard");
    const auto& h = e.msg.header;
    switch (h.kind) {
      case diloco::message_kind::welcome:
        if (h.flags & diloco::state_wanted) provide_model();
        break;
      case diloco::message_kind::update:
        if (h.fragment >= revision_.size()) break;
        revision_[h.fragment] = std::max(revision_[h.fragment], h.revision);
        // Ours merged, or refused with a resync that answers it: either way
        // the fragment is free for the next contribution. (The resyncs that
        // follow a repeated join answer nothing: ours is still in a round.)
        if (in_flight_[h.fragment] && h.answers >= in_flight_[h.fragment]) {
          if (h.status == diloco::update_status::merged) ++counts_.answered;
          in_flight_[h.fragment] = 0;
        }
        break;
      case diloco::message_kind::ack:
        if (h.fragment < in_flight_.size() && in_flight_[h.fragment] && h.answers == in_flight_[h.fragment])
          counts_.ack_us.push_back(
              std::chrono::duration<double, std::micro>(clock::now() - sent_at_[h.fragment]).count());
        break;
      case diloco::message_kind::reject: ++counts_.rejected; break;
      case diloco::message_kind::end: ended_ = true; break;
      default: break;
    }
  }

  /// A bootstrap asked for the model (each shard asks; `sharded` sends the
  /// layout and the states to every shard, so answering once serves all).
  void provide_model() {
    if (counts_.states_sent) return;
    const auto description = diloco::wire::encode_layout(layout_);
    auto l = next(diloco::message_kind::layout);
    l.header.codec = diloco::codec_id::bytes;
    l.header.element_count = description.size();
    l.header.layout = layout_.fingerprint();
    l.payload = diloco::byte_buffer(description.size());
    std::memcpy(l.payload.data(), description.data(), description.size());
    send(l);
    for (std::uint32_t p = 0; p < plan_.count(); ++p) {
      auto s = next(diloco::message_kind::state);
      s.header.codec = diloco::codec_id::f32;
      s.header.fragment = p;
      s.header.element_count = plan_[p].size();
      s.payload = diloco::byte_buffer(plan_[p].size() * sizeof(float));
      for (float& v : s.payload.as<float>()) v = 1.0f;
      send(s);
      ++counts_.states_sent;
    }
  }

  std::uint32_t id_;
  diloco::parameter_layout layout_;
  diloco::fragment_plan plan_;
  std::uint32_t period_;
  std::vector<std::unique_ptr<diloco::zeromq::client>> connections_;
  std::unique_ptr<diloco::sharded<diloco::zeromq::client>> link_;
  diloco::buffer_pool pool_;
  std::vector<std::uint64_t> revision_;     ///< newest revision held, per fragment
  std::vector<std::uint64_t> in_flight_;    ///< sequence of the contribution awaiting its merge, 0: none
  std::vector<clock::time_point> sent_at_;  ///< when it left
  std::uint64_t sequence_ = 0, local_step_ = 0;
  learner_counts counts_;
  bool ended_ = false;
};

}  // namespace bench
