// The syncer's counters in the Prometheus text exposition format (version
// 0.0.4, https://prometheus.io/docs/instrumenting/exposition_formats/): what a
// scrape of `diloco_syncer --metrics-port` returns, and what a program that
// embeds the syncer can serve itself. Depends on nothing but the counters.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "diloco/metrics/counters.hpp"

namespace diloco {

/// How a value is exported: a counter only grows (a restart from a checkpoint
/// continues it), a gauge goes up and down.
enum class metric_type : std::uint8_t { counter, gauge };

/// One counter of `syncer_metrics` as it is exported: Prometheus names it
/// `<prefix><name>_total` (a counter) or `<prefix><name>` (a gauge).
struct syncer_counter_description {
  std::uint64_t syncer_metrics::*field;
  std::string_view name;
  std::string_view help;  ///< one line, no backslash
  metric_type type;
};

/// Every counter of `syncer_metrics`, in `syncer_counter_fields` order.
inline constexpr syncer_counter_description syncer_counter_descriptions[] = {
    {&syncer_metrics::outer_updates, "outer_updates",
     "Outer updates applied (revisions created), all fragments together.", metric_type::counter},
    {&syncer_metrics::contributions_accepted, "contributions_accepted", "Contributions accepted into a round.",
     metric_type::counter},
    {&syncer_metrics::contributions_merged, "contributions_merged",
     "Accepted contributions merged into a published revision.", metric_type::counter},
    {&syncer_metrics::contributions_pending, "contributions_pending",
     "Accepted contributions waiting in an open round.", metric_type::gauge},
    {&syncer_metrics::contributions_lost, "contributions_lost",
     "Accepted contributions pending when a syncer stopped without flushing (counted on restore).",
     metric_type::counter},
    {&syncer_metrics::contributions_dropped, "contributions_dropped",
     "Accepted contributions in rounds whose result was not published.", metric_type::counter},
    {&syncer_metrics::rounds_dropped, "rounds_dropped", "Rounds not published: a non-finite or too large result.",
     metric_type::counter},
    {&syncer_metrics::contributions_clipped, "contributions_clipped",
     "Outer gradients scaled down to the clipping bound.", metric_type::counter},
    {&syncer_metrics::weights_clipped, "weights_clipped", "Merge weights cut to the clipping bound.",
     metric_type::counter},
    {&syncer_metrics::quarantines, "quarantines", "Learners quarantined.", metric_type::counter},
    {&syncer_metrics::learners_forgotten, "learners_forgotten",
     "Learner table places freed (gone too long, or to make room).", metric_type::counter},
    {&syncer_metrics::joins, "joins", "First joins of a learner id.", metric_type::counter},
    {&syncer_metrics::rejoins, "rejoins", "Joins of a new incarnation.", metric_type::counter},
    {&syncer_metrics::reconnects, "reconnects", "Joins of a known incarnation from a new connection.",
     metric_type::counter},
    {&syncer_metrics::leaves, "leaves", "Learners that left.", metric_type::counter},
    {&syncer_metrics::declared_dead, "declared_dead", "Learners declared dead after a heartbeat timeout.",
     metric_type::counter},
    {&syncer_metrics::revived, "revived", "Learners heard from again after a heartbeat timeout.", metric_type::counter},
    {&syncer_metrics::updates_sent, "updates_sent", "Fragment updates sent to learners.", metric_type::counter},
    {&syncer_metrics::verdicts_sent, "verdicts_sent", "Acks and rejects sent.", metric_type::counter},
    {&syncer_metrics::send_failures, "send_failures", "Messages the transport refused to send.", metric_type::counter},
    {&syncer_metrics::staleness_sum, "staleness_sum",
     "Sum over merged contributions of revisions between their base and the merge.", metric_type::counter},
    {&syncer_metrics::staleness_max, "staleness_max", "Largest staleness merged so far, in revisions.",
     metric_type::gauge},
    {&syncer_metrics::partial_rounds, "partial_rounds", "Rounds merged without every learner of the run.",
     metric_type::counter},
    {&syncer_metrics::tokens_merged, "tokens_merged",
     "Tokens of merged contributions, summed over fragments (fragments times the tokens trained).",
     metric_type::counter},
    {&syncer_metrics::steps_merged, "steps_merged", "Inner steps of merged contributions, summed over fragments.",
     metric_type::counter},
    {&syncer_metrics::contributions_replayed, "contributions_replayed",
     "Acknowledged contributions a restarted syncer took back from its journal.", metric_type::counter},
    {&syncer_metrics::losses_ignored, "losses_ignored", "Heartbeat training losses ignored as NaN or infinite.",
     metric_type::counter},
    {&syncer_metrics::payload_bytes_received, "payload_bytes_received",
     "Payload bytes of accepted contributions, as they arrived (compressed).", metric_type::counter},
    {&syncer_metrics::payload_bytes_sent, "payload_bytes_sent", "Payload bytes of the updates sent (compressed).",
     metric_type::counter},
    {&syncer_metrics::steps_reported_earlier, "steps_reported_earlier",
     "Inner steps reported computed by learner incarnations that are over.", metric_type::counter},
    {&syncer_metrics::counts_capped, "counts_capped",
     "Contributions whose reported tokens or steps were credited only up to what the learner's history allows.",
     metric_type::counter},
};

namespace detail {
consteval bool every_counter_described_in_order() {
  for (std::size_t i = 0; i < syncer_counter_count; ++i)
    if (syncer_counter_descriptions[i].field != syncer_counter_fields[i]) return false;
  return true;
}
}  // namespace detail
static_assert(std::size(syncer_counter_descriptions) == syncer_counter_count &&
                  detail::every_counter_described_in_order(),
              "diloco: describe every syncer_metrics counter in syncer_counter_descriptions, in "
              "syncer_counter_fields order, so that it is exported");

/// What the syncer knows besides its counters, at one moment.
struct syncer_gauges {
  std::uint64_t live_learners = 0;
  std::uint64_t known_learners = 0;            ///< in the table: live, or gone not long ago
  std::optional<double> training_loss{};       ///< `syncer::training_loss()`
  std::vector<std::uint64_t> revisions{};      ///< each fragment's revision
  std::uint64_t steps_computed = 0;            ///< `syncer::steps_computed()`
  std::optional<double> compute_efficiency{};  ///< `syncer::compute_efficiency()`

  /// The gauges of `sync` (a `diloco::syncer`). Cost: four passes over the
  /// learner table.
  template <class Syncer>
  static syncer_gauges of(const Syncer& sync) {
    syncer_gauges g;
    g.live_learners = sync.live_learners();
    g.known_learners = sync.known_learners();
    g.training_loss = sync.training_loss();
    g.steps_computed = sync.steps_computed();
    g.compute_efficiency = sync.compute_efficiency();
    for (std::uint32_t p = 0; p < sync.plan().count(); ++p) g.revisions.push_back(sync.revision(p));
    return g;
  }
};

namespace detail {

/// A sample value as Prometheus reads it: the shortest decimal that reads
/// back the same double, `NaN`, `+Inf` or `-Inf`.
inline std::string prometheus_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, v);
  return ec == std::errc{} ? std::string(text, end) : std::string("NaN");
}

inline void prometheus_family(std::string& out, std::string_view prefix, std::string_view name, std::string_view help,
                              metric_type type) {
  const std::string_view suffix = type == metric_type::counter ? "_total" : "";
  out.append("# HELP ").append(prefix).append(name).append(suffix).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(prefix).append(name).append(suffix);
  out.append(type == metric_type::counter ? " counter\n" : " gauge\n");
}

inline void prometheus_sample(std::string& out, std::string_view prefix, std::string_view name, std::string_view labels,
                              const std::string& value) {
  out.append(prefix).append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(value).append("\n");
}

}  // namespace detail

/// `m` and `g` in the Prometheus text format, version 0.0.4 (serve it as
/// `text/plain; version=0.0.4`). Each metric has a `# HELP` and a `# TYPE`
/// line, then its samples, one `name{labels} value` per line:
/// - each counter of `syncer_counter_descriptions`, as
///   `<prefix><name>_total` (counters) or `<prefix><name>` (gauges);
/// - `<prefix>rejected_total{reason="<reason>"}`, one sample for every
///   refusal reason, zeros included, so that every series exists from the
///   first scrape;
/// - the gauges `<prefix>live_learners`, `<prefix>known_learners`,
///   `<prefix>training_loss` (`NaN` while no live learner reports one),
///   `<prefix>steps_computed`, `<prefix>compute_efficiency` (`NaN` before
///   any report) and `<prefix>revision{fragment="<p>"}` per fragment.
/// Cost: about 5 KB of text, one allocation per line at most.
inline std::string prometheus_text(const syncer_metrics& m, const syncer_gauges& g = {},
                                   std::string_view prefix = "diloco_syncer_") {
  using detail::prometheus_family;
  using detail::prometheus_sample;
  std::string out;
  out.reserve(6000);
  for (const auto& c : syncer_counter_descriptions) {
    prometheus_family(out, prefix, c.name, c.help, c.type);
    const std::string name = std::string(c.name) + (c.type == metric_type::counter ? "_total" : "");
    prometheus_sample(out, prefix, name, {}, std::to_string(m.*c.field));
  }
  prometheus_family(out, prefix, "rejected", "Messages refused, by reason.", metric_type::counter);
  for (std::size_t r = 0; r < reject_reason_count; ++r)
    prometheus_sample(out, prefix, "rejected_total",
                      "reason=\"" + std::string(to_string(static_cast<reject_reason>(r))) + "\"",
                      std::to_string(m.rejected[r]));
  prometheus_family(out, prefix, "live_learners", "Learners joined, not left, heard from within the heartbeat timeout.",
                    metric_type::gauge);
  prometheus_sample(out, prefix, "live_learners", {}, std::to_string(g.live_learners));
  prometheus_family(out, prefix, "known_learners", "Learners in the table: live, or gone not long ago.",
                    metric_type::gauge);
  prometheus_sample(out, prefix, "known_learners", {}, std::to_string(g.known_learners));
  prometheus_family(out, prefix, "training_loss",
                    "Mean of the live learners' latest reported training losses (NaN: none reported).",
                    metric_type::gauge);
  prometheus_sample(out, prefix, "training_loss", {}, detail::prometheus_value(g.training_loss.value_or(std::nan(""))));
  prometheus_family(out, prefix, "steps_computed",
                    "Inner steps the learners reported computing, incarnations that are over included.",
                    metric_type::gauge);
  prometheus_sample(out, prefix, "steps_computed", {}, std::to_string(g.steps_computed));
  prometheus_family(out, prefix, "compute_efficiency",
                    "Share of the computed inner steps whose work reached the global model (NaN: none reported).",
                    metric_type::gauge);
  prometheus_sample(out, prefix, "compute_efficiency", {},
                    detail::prometheus_value(g.compute_efficiency.value_or(std::nan(""))));
  prometheus_family(out, prefix, "revision", "Revision of each fragment of the global model.", metric_type::gauge);
  for (std::size_t p = 0; p < g.revisions.size(); ++p)
    prometheus_sample(out, prefix, "revision", "fragment=\"" + std::to_string(p) + "\"",
                      std::to_string(g.revisions[p]));
  return out;
}

}  // namespace diloco
