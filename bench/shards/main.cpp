// bench_shards: how many contribution payload bytes per second a syncer of
// S shards merges, for S = 1, 2, 4 in one run.
//
// Each run starts S real `diloco_syncer` processes (shard s/S, ZeroMQ tcp on
// 127.0.0.1) and M synthetic learners, threads of this process, each
// connected to every shard through `diloco::sharded<zeromq::client>`. The
// learners send pre-computed fp32 contributions as fast as the syncers
// answer them (learner.hpp). After --warmup seconds, for --seconds, each
// shard's own record of its outer updates (its --trace: the contributions
// each merged, and when) says how many contributions it merged; merged
// bytes = contributions merged × fragment payload bytes (all P fragments
// are the same size). GB/s = 10⁹ merged bytes per second, all shards.
//
// Shard counts alternate over repetitions (1 2 4 1 2 4 …); the table shows
// the median GB/s and the median over repetitions of the ratio to the first row
// measured in the same repetition.
//
// With --replication none,sync,async (and --etcd, the etcd server it then
// starts), every shard leads through etcd and checkpoints (--durability),
// and for sync and async a standby syncer follows it: each row is a shard
// count and a mode, the ratio is to the first row of the same repetition,
// and the learners' acknowledgement latency (send to ack, median and 99th
// percentile) shows what waiting for the standby adds.
//
//   bench_shards [--shards 1,2,4] [--parameters 16M] [--fragments 8] [--learners 4]
//                [--quorum all|K] [--H 50] [--threads T] [--seconds 5] [--warmup 2]
//                [--repeat 3] [--syncer PATH] [--json]
//                [--replication none,sync,async --etcd PATH [--durability update|SEC]]
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <diloco_tools/cli.hpp>
#include "../common/json.hpp"
#include "../common/stats.hpp"
#include "learner.hpp"
#include "syncers.hpp"

namespace {

using bench::median;

using namespace std::chrono_literals;

struct options {
  std::vector<std::uint32_t> shards{1, 2, 4};
  std::size_t parameters = std::size_t{16} << 20;
  std::uint32_t fragments = 8;
  std::uint32_t learners = 4;
  std::string quorum = "all";
  std::uint32_t sync_period = 50;
  unsigned threads = 0;
  double seconds = 5;
  double warmup = 2;
  int repeat = 3;
  std::string syncer = DILOCO_SYNCER_PATH;
  bool json = false;
  std::vector<std::string> replication;  ///< empty: no etcd, no checkpoints (the plain bench)
  std::string etcd = "/usr/bin/etcd";
  std::string durability = "update";
};

std::optional<int> parse(int argc, char** argv, options& o) {
  CLI::App app(
      "Contribution bytes per second merged by a syncer of 1, 2, 4 shards (diloco_syncer processes, "
      "ZeroMQ tcp on 127.0.0.1).",
      "bench_shards");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--shards", o.shards, "shard counts S, each at most P (ratios are to the first)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u).description(""))
      ->option_text("S,...");
  app.add_option("--parameters", o.parameters, "fp32 parameters of the model, a multiple of P; suffixes K, M, G")
      ->transform(diloco_tools::size_multiple_of(1))
      ->capture_default_str()
      ->type_name("N");
  app.add_option("--fragments", o.fragments, "P, fragments of the model")
      ->check(CLI::Range(1u, 1024u).description(""))
      ->capture_default_str()
      ->type_name("P");
  app.add_option("--learners", o.learners, "M, synthetic learners (threads of this process)")
      ->check(CLI::Range(1u, 256u).description(""))
      ->capture_default_str()
      ->type_name("M");
  app.add_option("--quorum", o.quorum,
                 "K of every shard: 'all' (M, a round merges every learner's contribution) or "
                 "a number")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v == "all" || diloco_tools::whole_at_least(1)(v).empty() ? std::string()
                                                                            : "expected 'all' or K >= 1, got " + v;
          },
          ""))
      ->capture_default_str()
      ->type_name("all|K");
  app.add_option("--H", o.sync_period, "inner steps a contribution claims (weights only)")
      ->check(CLI::Range(1u, 1u << 20).description(""))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "--threads of every shard: merge and outer-step threads (0: every core)")
      ->capture_default_str()
      ->type_name("T");
  app.add_option("--seconds", o.seconds, "length of each measurement, 0.1 to 3600")
      ->check(diloco_tools::in(diloco_tools::interval<double>{0.1, 3600}))
      ->capture_default_str()
      ->type_name("S");
  app.add_option("--warmup", o.warmup, "streaming before each measurement, once every learner joined, 0 to 3600")
      ->check(diloco_tools::in(diloco_tools::interval<double>{0, 3600}))
      ->capture_default_str()
      ->type_name("S");
  app.add_option("--repeat", o.repeat, "interleaved repetitions (>= 1)")
      ->check(CLI::Range(1, 1'000'000).description(""))
      ->capture_default_str()
      ->type_name("K");
  app.add_option("--syncer", o.syncer, "the diloco_syncer to run")->capture_default_str()->type_name("PATH");
  app.add_flag("--json", o.json, "one JSON line on stdout, nothing else");
  app.add_option("--replication", o.replication,
                 "modes to compare: none (a primary alone), sync, async (with a standby); every shard then "
                 "leads through etcd and checkpoints")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "sync", "async"}).description(""))
      ->option_text("MODE,...");
  app.add_option("--etcd", o.etcd, "with --replication: the etcd server to start")
      ->capture_default_str()
      ->type_name("PATH");
  app.add_option("--durability", o.durability, "with --replication: each shard's --durability (update or seconds)")
      ->capture_default_str()
      ->type_name("update|SEC");
  if (const auto status = diloco_tools::parse(app, argc, argv)) return status;
  for (const auto s : o.shards)
    if (s > o.fragments) {
      std::fprintf(stderr, "bench_shards: --shards %u exceeds P = %u (a shard needs a fragment)\n", s, o.fragments);
      return diloco_tools::bad_usage;
    }
  if (o.parameters % o.fragments != 0 || o.parameters < o.fragments) {
    std::fprintf(stderr, "bench_shards: --parameters must be a positive multiple of P\n");
    return diloco_tools::bad_usage;
  }
  return std::nullopt;
}

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// What one run of S shards measured.
struct run_result {
  double ack_median_us = 0, ack_p99_us = 0;      ///< send to ack, every learner, the whole stream
  double gbps = 0;                               ///< merged bytes per second, all shards, 10⁹
  std::uint64_t merged = 0;                      ///< contributions merged in the window, all shards
  double window = 0;                             ///< seconds measured
  std::uint64_t rejected = 0;                    ///< refusals over the whole run, all shards
  std::uint64_t outer_updates = 0;               ///< over the whole run, all shards
  std::map<std::string, std::uint64_t> reasons;  ///< the refusals by reason
};

/// Contributions merged by outer updates published in [t0, t1).
std::uint64_t merged_between(const std::vector<bench::merge_record>& merges, double t0, double t1) {
  std::uint64_t n = 0;
  for (const auto& m : merges)
    if (m.time >= t0 && m.time < t1) n += m.contributions;
  return n;
}

run_result run_once(const options& o, std::uint32_t shard_count, const std::string& mode, const std::string& etcd,
                    const std::filesystem::path& directory) {
  static int runs = 0;
  const std::uint32_t learners = o.learners;
  const std::uint32_t quorum = o.quorum == "all" ? learners : static_cast<std::uint32_t>(std::stoul(o.quorum));
  bench::syncer_shards shards({.program = o.syncer,
                               .fragments = o.fragments,
                               .sync_period = o.sync_period,
                               .quorum = quorum,
                               .threads = o.threads,
                               .etcd = etcd,
                               .replication = mode.empty() ? "none" : mode,
                               .durability = o.durability,
                               .run_name = "run" + std::to_string(++runs)},
                              shard_count, directory);
  std::vector<double> acks;
  const auto layout = bench::equal_fragments(o.parameters, o.fragments);
  const std::size_t fragment_bytes = o.parameters / o.fragments * sizeof(float);

  std::atomic<bool> stop{false}, bootstrapped{false};
  std::atomic<std::uint32_t> joined{0};
  std::mutex mutex;
  std::string error;
  auto failed = [&](const std::string& what) {
    std::lock_guard lock(mutex);
    if (error.empty()) error = what;
    stop = true;
  };
  const auto join_deadline = std::chrono::steady_clock::now() + 60s;
  std::vector<std::thread> threads;
  for (std::uint32_t id = 0; id < learners; ++id)
    threads.emplace_back([&, id] {
      try {
        // Learner 0 joins first and provides the model (each shard's
        // bootstrap asks the first learner to join); the others then join.
        while (id != 0 && !bootstrapped.load() && !stop.load()) std::this_thread::sleep_for(5ms);
        ::zmq::context_t context;  // an I/O thread per learner, as a learner process has
        bench::synthetic_learner l(context, shards.endpoints(), id, layout, o.fragments, o.sync_period);
        if (!l.join(join_deadline, stop)) {
          if (!stop.load()) failed("learner " + std::to_string(id) + " did not join every shard within 60 s");
          return;
        }
        if (id == 0) bootstrapped = true;
        ++joined;
        l.stream(stop);
        {
          std::lock_guard lock(mutex);
          acks.insert(acks.end(), l.counts().ack_us.begin(), l.counts().ack_us.end());
        }
        if (l.shard_error() != diloco::shard_error::none) failed("learner " + std::to_string(id) + ": bad welcomes");
        if (l.ended()) failed("learner " + std::to_string(id) + ": a shard ended the run");
      } catch (const std::exception& e) {
        failed(e.what());
      }
    });

  auto wait = [&](auto done, std::chrono::duration<double> limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done() && !stop.load() && std::chrono::steady_clock::now() < end) {
      shards.check_running();
      std::this_thread::sleep_for(10ms);
    }
  };
  double t0 = 0, t1 = 0;
  try {
    wait([&] { return joined.load() == learners; }, 70s);
    if (!stop.load() && joined.load() != learners) failed("learners did not all join within 70 s");
    wait([] { return false; }, std::chrono::duration<double>(o.warmup));
    t0 = epoch_seconds();
    wait([] { return false; }, std::chrono::duration<double>(o.seconds));
    t1 = epoch_seconds();
  } catch (const std::exception& e) {
    failed(e.what());
  }
  stop = true;
  for (auto& t : threads) t.join();
  if (!error.empty()) throw std::runtime_error(error);
  shards.stop(30s);

  run_result r;
  r.window = t1 - t0;
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    const auto merges = shards.merges(s);
    r.merged += merged_between(merges, t0, t1);
    const auto counters = shards.final_counters(s);
    // The trace and the counters are the same syncer's; they must agree.
    std::uint64_t traced = 0;
    for (const auto& m : merges) traced += m.contributions;
    if (traced != counters.at("contributions_merged").get<std::uint64_t>())
      throw std::runtime_error("shard " + std::to_string(s) + ": its trace and its counters disagree");
    if (!counters.at("failure").is_null()) throw std::runtime_error("shard " + std::to_string(s) + " failed");
    if (counters.at("contributions_dropped").get<std::uint64_t>() != 0)
      throw std::runtime_error("shard " + std::to_string(s) + " dropped contributions");
    for (const auto& [reason, count] : counters.at("rejected").items()) {
      r.rejected += count.get<std::uint64_t>();
      r.reasons[reason] += count.get<std::uint64_t>();
    }
    r.outer_updates += counters.at("outer_updates").get<std::uint64_t>();
  }
  if (r.merged == 0) throw std::runtime_error("nothing was merged in the measured window");
  r.gbps = static_cast<double>(r.merged) * static_cast<double>(fragment_bytes) / r.window / 1e9;
  if (!acks.empty()) {
    std::sort(acks.begin(), acks.end());
    r.ack_median_us = acks[acks.size() / 2];
    r.ack_p99_us = acks[std::min(acks.size() - 1, acks.size() * 99 / 100)];
  }
  return r;
}

struct series {
  std::uint32_t shards;
  std::string mode;  ///< --replication's, or empty
  std::vector<run_result> runs;
  std::vector<double> ratio;  ///< to the first row of the same repetition
  std::string name() const { return mode.empty() ? std::to_string(shards) : std::to_string(shards) + " " + mode; }
  std::vector<double> acks(double run_result::*field) const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    return v;
  }
  std::vector<double> gbps() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.gbps);
    return v;
  }
};

std::string size_name(std::size_t n) {
  if (n % (std::size_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % (std::size_t{1} << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const auto status = parse(argc, argv, o)) return *status;
  diloco::zeromq::keep_large_blocks();  // the learners receive every update, fragments of many MiB
  char pattern[] = "/tmp/bench_shards.XXXXXX";
  if (!::mkdtemp(pattern)) {
    std::perror("bench_shards: mkdtemp");
    return 1;
  }
  const std::filesystem::path directory = pattern;
  std::vector<series> all;
  for (const auto s : o.shards) {
    if (o.replication.empty()) all.push_back({s, {}, {}, {}});
    for (const auto& mode : o.replication) all.push_back({s, mode, {}, {}});
  }
  int status = 0;
  std::optional<diloco_tools::child_process> etcd;
  std::string etcd_url;
  try {
    if (!o.replication.empty()) {
      const auto port = std::to_string(diloco_tools::free_loopback_port());
      const auto peer = "http://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port());
      etcd_url = "http://127.0.0.1:" + port;
      etcd = diloco_tools::child_process::spawn(
          {{o.etcd, "--name", "bench", "--data-dir", (directory / "etcd").string(), "--listen-client-urls", etcd_url,
            "--advertise-client-urls", etcd_url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "bench=" + peer},
           directory / "etcd.log",
           directory / "etcd.log"});
    }
    for (int rep = 0; rep < o.repeat; ++rep) {
      for (auto& row : all) {
        row.runs.push_back(run_once(o, row.shards, row.mode, etcd_url, directory));
        const auto& r = row.runs.back();
        if (!o.json) {
          std::string refused;
          for (const auto& [reason, count] : r.reasons) refused += " " + reason + "=" + std::to_string(count);
          std::fprintf(stderr,
                       "  rep %d  S=%s  %7.3f GB/s merged  (%llu contributions in %.2f s; ack %.0f us median, "
                       "%.0f us p99; refused:%s)\n",
                       rep + 1, row.name().c_str(), r.gbps, static_cast<unsigned long long>(r.merged), r.window,
                       r.ack_median_us, r.ack_p99_us, refused.empty() ? " none" : refused.c_str());
        }
      }
      for (auto& row : all) row.ratio.push_back(row.runs.back().gbps / all.front().runs.back().gbps);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_shards: %s (logs in %s)\n", e.what(), directory.c_str());
    return 1;
  }
  if (etcd) {
    etcd->signal(SIGTERM);
    if (!etcd->wait_for(std::chrono::seconds(10))) (void)etcd->kill_and_reap();
  }
  std::filesystem::remove_all(directory);

  const std::uint32_t quorum = o.quorum == "all" ? o.learners : static_cast<std::uint32_t>(std::stoul(o.quorum));
  const std::size_t fragment_bytes = o.parameters / o.fragments * sizeof(float);
  if (o.json) {
    auto number = [](double v) { return bench::rounded(v, 4); };
    bench::json shards = bench::json::object();
    for (const auto& row : all) {
      bench::json gbps = bench::json::array(), merged = bench::json::array(), rejected = bench::json::array();
      for (const auto& r : row.runs) {
        gbps.push_back(number(r.gbps));
        merged.push_back(r.merged);
        rejected.push_back(r.rejected);
      }
      shards[row.mode.empty() ? std::to_string(row.shards) : row.name()] = {
          {"gbps", std::move(gbps)},
          {"median_gbps", number(median(row.gbps()))},
          {"ratio_to_1", number(median(row.ratio))},
          {"ack_median_us", number(median(row.acks(&run_result::ack_median_us)))},
          {"ack_p99_us", number(median(row.acks(&run_result::ack_p99_us)))},
          {"merged", std::move(merged)},
          {"rejected", std::move(rejected)}};
    }
    const bench::json line{{"parameters", o.parameters},
                           {"fragments", o.fragments},
                           {"fragment_bytes", fragment_bytes},
                           {"learners", o.learners},
                           {"quorum", quorum},
                           {"threads", o.threads},
                           {"cores", std::thread::hardware_concurrency()},
                           {"seconds", o.seconds},
                           {"repeat", o.repeat},
                           {"shards", std::move(shards)}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf(
        "%s fp32 parameters in P=%u fragments of %zu bytes, M=%u learners, K=%u, %d repetitions of %.1f s, "
        "%u cores\n",
        size_name(o.parameters).c_str(), o.fragments, fragment_bytes, o.learners, quorum, o.repeat, o.seconds,
        std::thread::hardware_concurrency());
    std::printf("  %-12s %10s %19s %8s %12s %12s\n", "shards", "GB/s", "[min - max]", "x first", "ack median",
                "ack p99");
    for (const auto& row : all) {
      const auto g = row.gbps();
      const auto [lo, hi] = std::minmax_element(g.begin(), g.end());
      std::printf("  %-12s %10.3f [%7.3f - %7.3f] %8.3f %9.0f us %9.0f us\n", row.name().c_str(), median(g), *lo, *hi,
                  median(row.ratio), median(row.acks(&run_result::ack_median_us)),
                  median(row.acks(&run_result::ack_p99_us)));
    }
  }
  return status;
}
