// bench_transport: throughput and latency of diloco's transports against a raw
// blocking TCP socket, on loopback, for several payload sizes, in one run.
//
// For each size, repetition after repetition, every transport in turn (A B C
// … A B C …): a fresh sender/receiver pair is made, warmed up (untimed
// streaming and round trips), then
//   throughput  a sender thread streams messages of that size through the
//               transport's API to a receiver thread that takes and releases
//               them, for --seconds; GB/s = 10⁹ payload bytes per second, from
//               the first send to the last receipt;
//   latency     one message sent, echoed back, received: round-trip time in µs.
// Transports (see README.md):
//   raw_tcp        blocking TCP socket, length-prefixed writev, reused buffers
//   raw_tcp_crc32c the same, plus CRC-32C of each payload at both ends
//   inproc_hub     diloco::inproc::hub (in-process, no copy, no checksum)
//   zmq_inproc     diloco::zeromq over inproc://
//   zmq_ipc        diloco::zeromq over ipc://
//   zmq_tcp        diloco::zeromq over tcp://127.0.0.1
//   zmq_tcp_whole  the same, every payload in one frame (chunk_bytes = 0)
//   zmq_tcp_curve  diloco::zeromq over tcp://127.0.0.1 with CURVE
//   asio_tcp       diloco::tcp (standalone Asio) over 127.0.0.1
// Prints the median GB/s, [min–max], the median over repetitions of the ratio
// to raw_tcp measured in the same repetition, and the median and p99 round
// trip over all repetitions; with CURVE, libsodium's own speed at CURVE's
// cipher on one thread, CURVE's ceiling, measured before each size.
//
//   bench_transport [--sizes 64K,1M,16M,64M] [--seconds 0.5] [--repeat 3]
//                   [--warmup 0.2] [--latency-seconds 0.25]
//                   [--transports raw_tcp,zmq_tcp,...] [--queue-mib 256]
//                   [--chunk-kib 1024] [--no-keep-large-blocks] [--json]
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <diloco_tools/cli.hpp>
#include "../common/json.hpp"
#include "../common/stats.hpp"
#include "bench.hpp"

namespace {

using bench::link;
using bench::link_options;
using bench::median;
using bench::quantile;

struct transport {
  const char* name;
  const char* label;
  std::function<std::unique_ptr<link>(const link_options&)> make;
};

std::vector<transport> all_transports() {
  return {
      {"raw_tcp", "raw tcp", [](const link_options& o) { return bench::make_raw_tcp(o, false); }},
      {"raw_tcp_crc32c", "raw tcp + crc32c", [](const link_options& o) { return bench::make_raw_tcp(o, true); }},
      {"inproc_hub", "inproc::hub", [](const link_options& o) { return bench::make_inproc_hub(o); }},
      {"zmq_inproc", "zeromq inproc", [](const link_options& o) { return bench::make_zmq(o, "inproc", false); }},
      {"zmq_ipc", "zeromq ipc", [](const link_options& o) { return bench::make_zmq(o, "ipc", false); }},
      {"zmq_tcp", "zeromq tcp", [](const link_options& o) { return bench::make_zmq(o, "tcp", false); }},
      {"zmq_tcp_whole", "zeromq tcp whole",
       [](const link_options& o) {
         auto whole = o;
         whole.zmq_chunk_bytes = 0;
         return bench::make_zmq(whole, "tcp", false);
       }},
      {"zmq_tcp_curve", "zeromq tcp curve", [](const link_options& o) { return bench::make_zmq(o, "tcp", true); }},
      {"asio_tcp", "asio tcp", [](const link_options& o) { return bench::make_asio_tcp(o); }},
  };
}

struct options {
  std::vector<std::size_t> sizes{std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                                 std::size_t{64} << 20};
  double seconds = 0.5;
  int repeat = 3;
  double warmup = 0.2;
  double latency_seconds = 0.25;
  std::vector<std::string> transports;  ///< empty: all
  std::size_t queue_bytes = std::size_t{256} << 20;
  std::size_t chunk_bytes = std::size_t{1} << 20;
  bool keep_large_blocks = true;
  bool json = false;
};

/// Reads the command line into `o`; see `diloco_tools::parse` for the result.
std::optional<int> parse(int argc, char** argv, options& o) {
  CLI::App app("Throughput and latency of diloco's transports against a raw TCP socket, on loopback.",
               "bench_transport");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> names;
  for (const auto& t : all_transports()) names.emplace_back(t.name);
  std::size_t queue_mib = o.queue_bytes >> 20;
  app.add_option("--sizes", o.sizes,
                 "payload sizes in bytes, multiples of 4; suffixes K, M, G are powers of 2 (64K,1M,16M,64M)")
      ->delimiter(',')
      ->transform(diloco_tools::size_multiple_of(4))
      ->option_text("N,...");
  app.add_option("--seconds", o.seconds, "length of each throughput measurement, 0.001 to 3600")
      ->check(diloco_tools::in(diloco_tools::interval<double>{1e-3, 3600}))
      ->capture_default_str()
      ->type_name("S");
  app.add_option("--repeat", o.repeat, "interleaved repetitions (>= 1)")
      ->check(CLI::Range(1, 1'000'000).description(""))
      ->capture_default_str()
      ->type_name("K");
  app.add_option("--warmup", o.warmup, "untimed streaming before each measurement, 0 to 3600")
      ->check(diloco_tools::in(diloco_tools::interval<double>{0, 3600}))
      ->capture_default_str()
      ->type_name("S");
  app.add_option("--latency-seconds", o.latency_seconds,
                 "round trips per measurement, for about S seconds (5 at least)")
      ->check(diloco_tools::in(diloco_tools::interval<double>{0, 3600}))
      ->capture_default_str()
      ->type_name("S");
  app.add_option("--transports", o.transports,
                 "a subset of: raw_tcp raw_tcp_crc32c inproc_hub zmq_inproc zmq_ipc zmq_tcp zmq_tcp_whole "
                 "zmq_tcp_curve asio_tcp "
                 "(ratios need raw_tcp; default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(names).description(""))
      ->option_text("A,B,...");
  app.add_option("--queue-mib", queue_mib, "send and receive queue budget of each endpoint, MiB (1 to 1M)")
      ->transform(diloco_tools::size_multiple_of(1))
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20).description(""))
      ->capture_default_str()
      ->type_name("Q");
  std::size_t chunk_kib = o.chunk_bytes >> 10;
  app.add_option("--chunk-kib", chunk_kib, "ZeroMQ: payloads larger than this go in parts of this size, KiB (0: whole)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20).description(""))
      ->capture_default_str()
      ->type_name("C");
  bool leave_malloc = false;
  app.add_flag("--no-keep-large-blocks", leave_malloc, "ZeroMQ: leave malloc alone (no zeromq::keep_large_blocks())");
  app.add_flag("--json", o.json, "one JSON object per size on stdout, nothing else");
  const auto status = diloco_tools::parse(app, argc, argv);
  o.queue_bytes = queue_mib << 20;
  o.chunk_bytes = chunk_kib << 10;
  o.keep_large_blocks = !leave_malloc;
  return status;
}

std::string size_name(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (std::size_t{1} << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

struct measured {
  const transport* t;
  std::vector<double> gbps;    ///< one per repetition
  std::vector<double> faults;  ///< page faults (whole process) per message received, one per repetition
  std::vector<double> ratio;   ///< to raw_tcp of the same repetition
  std::vector<double> rtt_us;  ///< every round trip of every repetition
};

struct size_result {
  std::size_t bytes;
  double crc_gbps;
  double cipher_gbps;  ///< libsodium's crypto_box_afternm on one thread over one part (NaN: no CURVE run)
  std::vector<measured> rows;
};

const measured* find(const size_result& s, std::string_view name) {
  for (const auto& m : s.rows)
    if (name == m.t->name) return &m;
  return nullptr;
}

/// Median over repetitions of a/b, each pair from one repetition.
double paired_ratio(const measured* a, const measured* b) {
  if (!a || !b) return NAN;
  std::vector<double> r;
  for (std::size_t i = 0; i < a->gbps.size() && i < b->gbps.size(); ++i) r.push_back(a->gbps[i] / b->gbps[i]);
  return median(r);
}

/// Minor and major page faults of the whole process so far.
long page_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

size_result run_size(const options& o, std::size_t bytes, const std::vector<transport>& chosen) {
  const bool curve = std::any_of(chosen.begin(), chosen.end(),
                                 [](const transport& t) { return t.name == std::string_view("zmq_tcp_curve"); });
  const std::size_t part = o.chunk_bytes == 0 ? bytes : std::min(bytes, o.chunk_bytes);
  size_result s{bytes, bench::crc32c_gbps(bytes, 5), curve ? bench::curve_cipher_gbps(part, 0.25) : NAN, {}};
  for (const auto& t : chosen) s.rows.push_back({&t, {}, {}, {}, {}});
  link_options lo;
  lo.payload_bytes = bytes;
  lo.queue_bytes = o.queue_bytes;
  lo.zmq_keep_large_blocks = o.keep_large_blocks;
  lo.zmq_chunk_bytes = o.chunk_bytes;
  for (int r = 0; r < o.repeat; ++r) {
    double raw = NAN;
    for (auto& m : s.rows) {
      auto l = m.t->make(lo);
      if (o.warmup > 0) {
        (void)l->stream({o.warmup, 4});
        std::vector<double> ignored;
        l->ping_pong(o.warmup / 4, 2, 1000, ignored);
      }
      const auto faults_before = page_faults();
      const auto got = l->stream({o.seconds, 8});
      const auto faults = page_faults() - faults_before;
      const double gbps = static_cast<double>(got.payload_bytes) / got.seconds / 1e9;
      m.gbps.push_back(gbps);
      m.faults.push_back(static_cast<double>(faults) / static_cast<double>(got.messages));
      if (std::string_view(m.t->name) == "raw_tcp") raw = gbps;
      l->ping_pong(o.latency_seconds, 5, 100000, m.rtt_us);
      if (!o.json)
        std::fprintf(stderr, "  %s rep %d %-18s %8.3f GB/s  (%llu messages in %.2f s)\n", size_name(bytes).c_str(),
                     r + 1, m.t->label, gbps, static_cast<unsigned long long>(got.messages), got.seconds);
    }
    for (auto& m : s.rows) m.ratio.push_back(m.gbps.back() / raw);
  }
  return s;
}

void print_size(const options& o, const size_result& s) {
  std::printf("payload %s: %d repetitions, %.2f s each; crc32c alone %.2f GB/s on one thread\n",
              size_name(s.bytes).c_str(), o.repeat, o.seconds, s.crc_gbps);
  std::printf("  %-18s %8s %17s %7s %11s %10s %7s %11s\n", "transport", "GB/s", "[min - max]", "x raw", "RTT med us",
              "RTT p99 us", "trips", "faults/msg");
  for (const auto& m : s.rows) {
    const auto [lo, hi] = std::minmax_element(m.gbps.begin(), m.gbps.end());
    std::printf("  %-18s %8.3f [%7.3f - %7.3f] %7.3f %11.1f %10.1f %7zu %11.1f\n", m.t->label, median(m.gbps), *lo, *hi,
                median(m.ratio), median(m.rtt_us), quantile(m.rtt_us, 0.99), m.rtt_us.size(), median(m.faults));
  }
  const double curve = paired_ratio(find(s, "zmq_tcp_curve"), find(s, "zmq_tcp"));
  if (!std::isnan(curve))
    std::printf("  zeromq tcp: CURVE / plaintext throughput %.3f; CURVE / its cipher alone (%.3f GB/s) %.3f\n", curve,
                s.cipher_gbps, median(find(s, "zmq_tcp_curve")->gbps) / s.cipher_gbps);
  std::printf("\n");
  std::fflush(stdout);
}

void print_json(const options& o, const size_result& s) {
  auto number = [](double v) { return bench::rounded(v, 6); };  // NaN: null
  bench::json transports = bench::json::object();
  for (const auto& m : s.rows) {
    bench::json gbps = bench::json::array();
    for (const double g : m.gbps) gbps.push_back(number(g));
    transports[m.t->name] = {{"gbps", std::move(gbps)},
                             {"median_gbps", number(median(m.gbps))},
                             {"ratio_to_raw", number(median(m.ratio))},
                             {"rtt_median_us", number(median(m.rtt_us))},
                             {"rtt_p99_us", number(quantile(m.rtt_us, 0.99))},
                             {"trips", m.rtt_us.size()},
                             {"page_faults_per_message", number(median(m.faults))}};
  }
  const bench::json line{
      {"payload_bytes", s.bytes},
      {"repeat", o.repeat},
      {"seconds", o.seconds},
      {"queue_bytes", o.queue_bytes},
      {"keep_large_blocks", o.keep_large_blocks},
      {"crc32c_gbps", number(s.crc_gbps)},
      {"transports", std::move(transports)},
      {"curve_over_plaintext", number(paired_ratio(find(s, "zmq_tcp_curve"), find(s, "zmq_tcp")))},
      {"curve_cipher_gbps", number(s.cipher_gbps)},
      {"curve_over_cipher",
       number(find(s, "zmq_tcp_curve") ? median(find(s, "zmq_tcp_curve")->gbps) / s.cipher_gbps : NAN)},
      {"chunk_bytes", o.chunk_bytes}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

void print_summary(const std::vector<size_result>& all) {
  std::printf("summary: median GB/s (x raw tcp)\n  %-18s", "transport");
  for (const auto& s : all) std::printf(" %17s", size_name(s.bytes).c_str());
  std::printf("\n");
  for (std::size_t i = 0; i < all.front().rows.size(); ++i) {
    std::printf("  %-18s", all.front().rows[i].t->label);
    for (const auto& s : all) {
      char cell[40];
      std::snprintf(cell, sizeof cell, "%.2f (%.2f)", median(s.rows[i].gbps), median(s.rows[i].ratio));
      std::printf(" %17s", cell);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const auto status = parse(argc, argv, o)) return *status;
  const auto known = all_transports();
  std::vector<transport> chosen;
  for (const auto& t : known)
    if (o.transports.empty() || std::find(o.transports.begin(), o.transports.end(), t.name) != o.transports.end())
      chosen.push_back(t);
  if (const auto bad = bench::check_crc32c(); !bad.empty()) {
    std::fprintf(stderr, "bench_transport: %s\n", bad.c_str());
    return 1;
  }
  try {
    std::vector<size_result> all;
    for (const auto bytes : o.sizes) {
      all.push_back(run_size(o, bytes, chosen));
      if (o.json)
        print_json(o, all.back());
      else
        print_size(o, all.back());
    }
    if (!o.json) print_summary(all);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_transport: %s\n", e.what());
    return 1;
  }
  return 0;
}
