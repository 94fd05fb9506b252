// The syncer side of the bench: S `diloco_syncer` processes, shard s of S
// each, bound to a free port on 127.0.0.1, each recording its outer updates
// in a trace (--trace, docs/chaos.md) that the bench reads back after the
// run. The trace, not a periodic counter line, because a syncer that always
// has a message waiting writes its periodic lines only when its queue
// empties, which under this load it hardly ever does; a trace line is
// written as each merge is published, stamped with the wall clock.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <diloco_tools/loopback.hpp>
#include <diloco_tools/process.hpp>
#include <nlohmann/json.hpp>

namespace bench {

struct syncer_settings {
  std::string program;             ///< the diloco_syncer executable
  std::uint32_t fragments = 8;     ///< P
  std::uint32_t sync_period = 50;  ///< H
  std::uint32_t quorum = 1;        ///< K
  unsigned threads = 0;            ///< --threads of each shard (0: every core)
  /// With an etcd URL, every shard leads through it and checkpoints
  /// (--checkpoint-dir, --durability `durability`), and with `replication`
  /// "sync" or "async" a standby follows it (--replication-endpoint): what
  /// replication costs is measured against "none", the same primary alone.
  std::string etcd;
  std::string replication = "none";
  std::string durability = "update";
  std::string run_name;  ///< unique per run: the leadership keys' prefix
};

/// One outer update of a shard: when it was published (s since the epoch,
/// µs precision) and how many contributions it merged.
struct merge_record {
  double time = 0;
  std::uint64_t contributions = 0;
};

/// S running shards; destroying them kills (SIGKILL) whatever still runs.
class syncer_shards {
 public:
  syncer_shards(const syncer_settings& s, std::uint32_t count, const std::filesystem::path& directory)
      : directory_(directory) {
    for (std::uint32_t i = 0; i < count; ++i) {
      endpoints_.push_back("tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port()));
      const auto name = "shard" + std::to_string(i);
      std::filesystem::remove(trace(i));
      diloco_tools::process_spec spec;
      spec.argv = {s.program,
                   "--endpoint",
                   endpoints_.back(),
                   "--fragments",
                   std::to_string(s.fragments),
                   "--H",
                   std::to_string(s.sync_period),
                   "--quorum",
                   std::to_string(s.quorum),
                   "--grace",
                   "0",  // a round closes once its quorum is in: merging, not waiting, is measured
                   "--shard",
                   std::to_string(i) + "/" + std::to_string(count),
                   "--threads",
                   std::to_string(s.threads),
                   "--end-when-gone",
                   "never",  // the bench ends the run (SIGTERM)
                   "--trace",
                   trace(i).string(),
                   "--quiet"};
      spec.stdout_path = directory_ / (name + ".json");
      spec.stderr_path = directory_ / (name + ".log");
      spec.append = false;
      spec.null_stdin = true;
      if (s.etcd.empty()) {
        children_.push_back(diloco_tools::child_process::spawn(spec));
        continue;
      }
      // The primary leads first (its log says so); then its standby follows.
      const auto key = "/bench/" + s.run_name + "/shard-" + std::to_string(i) + "/leader";
      const auto leading = [&](diloco_tools::process_spec p, const std::string& slot, const std::string& endpoint) {
        for (std::size_t k = 0; k + 1 < p.argv.size(); ++k)
          if (p.argv[k] == "--endpoint") p.argv[k + 1] = endpoint;
        const auto replication = "tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port());
        p.argv.insert(p.argv.end(), {"--etcd", s.etcd, "--leader-key", key, "--lease-ttl", "5", "--checkpoint-dir",
                                     (directory_ / (name + slot)).string(), "--durability", s.durability});
        if (s.replication != "none")
          p.argv.insert(p.argv.end(), {"--replication-endpoint", replication, "--replication", s.replication});
        if (slot == "b") {
          p.argv.erase(std::find(p.argv.begin(), p.argv.end(), "--trace"),
                       std::find(p.argv.begin(), p.argv.end(), "--quiet"));
          p.stdout_path = directory_ / (name + "b.json");
          p.stderr_path = directory_ / (name + "b.log");
        }
        std::filesystem::remove_all(directory_ / (name + slot));
        return p;
      };
      children_.push_back(diloco_tools::child_process::spawn(leading(spec, "a", endpoints_.back())));
      wait_for_line(directory_ / (name + ".log"), "listening on");
      if (s.replication == "none") continue;
      const auto standby_endpoint = "tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port());
      standbys_.push_back(diloco_tools::child_process::spawn(leading(spec, "b", standby_endpoint)));
      wait_for_line(directory_ / (name + "b.log"), "replication: following");
    }
  }

  ~syncer_shards() {
    for (auto& c : standbys_) (void)c.kill_and_reap();
  }

  const std::vector<std::string>& endpoints() const noexcept { return endpoints_; }

  /// Throws if a shard has ended (it never should before `stop`).
  void check_running() {
    for (std::size_t i = 0; i < children_.size(); ++i)
      if (auto st = children_[i].poll())
        throw std::runtime_error("shard " + std::to_string(i) + " ended early (" + st->to_string() +
                                 "): " + log_tail(i));
  }

  /// SIGTERM to every shard, which merges its open rounds, prints its
  /// counters and exits; throws unless each exits with 0 within `timeout`.
  /// Standbys stop first (a primary that ends gives its leadership up).
  void stop(std::chrono::milliseconds timeout) {
    for (auto& c : standbys_) {
      c.signal(SIGTERM);
      (void)c.wait_for(timeout);
    }
    for (auto& c : children_) c.signal(SIGTERM);
    for (std::size_t i = 0; i < children_.size(); ++i) {
      const auto st = children_[i].wait_for(timeout);
      if (!st) {
        children_[i].kill_and_reap();
        throw std::runtime_error("shard " + std::to_string(i) + " did not stop within " +
                                 std::to_string(timeout.count()) + " ms of SIGTERM");
      }
      if (!st->exited || st->code != 0)
        throw std::runtime_error("shard " + std::to_string(i) + " ended with " + st->to_string() + ": " + log_tail(i));
    }
  }

  /// Shard i's outer updates, oldest first.
  std::vector<merge_record> merges(std::uint32_t i) const {
    std::ifstream in(trace(i));
    std::vector<merge_record> out;
    for (std::string text; std::getline(in, text);) {
      const auto j = nlohmann::json::parse(text);
      if (j.at("ev") != "merged") continue;
      out.push_back({j.at("t").get<double>() / 1e6, j.at("contributions").size()});
    }
    return out;
  }

  /// Shard i's final counters (the JSON line it prints when it stops).
  nlohmann::json final_counters(std::uint32_t i) const {
    std::ifstream in(directory_ / ("shard" + std::to_string(i) + ".json"));
    std::string text;
    std::getline(in, text);
    return nlohmann::json::parse(text);
  }

 private:
  std::filesystem::path trace(std::uint32_t i) const { return directory_ / ("shard" + std::to_string(i) + ".trace"); }

  std::string log_tail(std::size_t i) const {
    std::ifstream in(directory_ / ("shard" + std::to_string(i) + ".log"));
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    return last;
  }

  /// Waits (at most 30 s) until the log at `path` holds `text`; throws if it does not.
  static void wait_for_line(const std::filesystem::path& path, const std::string& text) {
    for (int tries = 0; tries < 300; ++tries) {
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);)
        if (line.find(text) != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error(path.string() + " did not say \"" + text + "\" within 30 s");
  }

  std::filesystem::path directory_;
  std::vector<std::string> endpoints_;
  std::vector<diloco_tools::child_process> children_;
  std::vector<diloco_tools::child_process> standbys_;
};

}  // namespace bench
