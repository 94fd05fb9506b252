// diloco_chaos: runs a syncer and M learner processes under a seeded fault
// schedule (SIGKILL, SIGSTOP/SIGCONT, restarts), then reports goodput, global
// downtime, what became of every contribution, and whether any learner saw a
// revision go backwards (docs/chaos.md).
//
// examples/01_fashion_mnist/chaos.py shows how to call it; docs/chaos.md
// describes the trace and the report.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <diloco_tools/cli.hpp>
#include <diloco_tools/loopback.hpp>
#include <diloco_tools/process.hpp>
#include <nlohmann/json.hpp>

#include "analyze.hpp"
#include "report_json.hpp"
#include "runner.hpp"
#if DILOCO_CHAOS_WITH_ETCD
#include "leaders.hpp"
#endif

namespace {

namespace fs = std::filesystem;

constexpr const char* description = R"(Starts the syncer command and M learner commands, injects faults on a seeded
schedule, and writes DIR/events.jsonl (everything that happened), DIR/logs/
(each process's output), DIR/report.json and DIR/timeline.png. Exit status 0
when the run's invariants hold, 1 when one fails, 2 for bad usage.

  diloco_chaos --out DIR --learners M --duration SEC --syncer CMD --learner CMD [options]
  diloco_chaos --report DIR [--downtime-bound SEC] [--title TEXT]
)";

constexpr const char* placeholders = R"(
Commands are split at spaces (no quoting); these words are replaced:
  {endpoint}     tcp://127.0.0.1:PORT, a free loopback port, the same for every restart; with
                 --shards N: the syncer's own shard's, and for learners every shard's, comma-separated
  {port}         the port of {endpoint} alone (with --shards N: the syncer's own shard's, and
                 for learners shard 0's), for commands that reach the syncer at another address
  {shard} {shards}     the syncer: which shard it is (0 when not sharded), and N (1)
  {trace}        DIR/events.jsonl, which every process appends to
  {dir}          DIR
  {id} {incarnation}   learners: which learner, and its process count from 1
  {stop_at}      learners: the wall time (s since the epoch) at which to finish
  {restart}      the syncer: 0, then 1, 2, ... after each kill
  {index}        the syncer: its process's number, SHARD x SLOTS + SLOT (SLOTS: 2 with --standby, else 1)
--syncer-host HOST puts HOST in place of 127.0.0.1 in the syncers' endpoints ({index}, {shard} and {slot} in it
are replaced), for syncers that run at addresses of their own (in network namespaces: docs/chaos.md).
With --standby, each shard runs two syncer processes, slots a and b, that lead it in turn:
  {endpoint}     the syncer: its own; learners: both slots' of each shard, 'a|b'
  {slot}         the syncer: a or b
  {etcd}         the etcd server's URL, for --etcd
  {replication}  the syncer: a free endpoint of its own (at --syncer-host), for --replication-endpoint
  {state}        the syncer: DIR/state/syncer-SHARD-SLOT, for --checkpoint-dir (--lose-disk deletes it)

timeline.png is drawn by plot_timeline.py with matplotlib (Debian: python3-matplotlib).
)";

std::vector<std::string> words(const std::string& command) {
  std::istringstream in(command);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

/// "ID:SEC" of --learner-kill-at as a kill of learner ID at SEC s. Throws std::invalid_argument naming the text.
diloco_chaos::fault planned_kill(const std::string& text) {
  const auto bad = [&] { return std::invalid_argument("--learner-kill-at: \"" + text + "\" is not ID:SEC"); };
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0) throw bad();
  diloco_chaos::fault f;
  try {
    std::size_t used = 0;
    const unsigned long id = std::stoul(text.substr(0, colon), &used);
    if (used != colon || text[0] == '-' || id > 0xffffffffUL) throw bad();
    f.learner = static_cast<std::uint32_t>(id);
    f.at_seconds = std::stod(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  return f;
}

/// plot_timeline.py: beside the sources in a build tree, else where `make install` put it (share/diloco/ next to
/// the bin/ that holds this program). Throws if neither exists.
fs::path plot_script() {
  std::vector<fs::path> candidates{DILOCO_CHAOS_PLOT_SCRIPT};
  std::error_code error;
  if (const fs::path self = fs::read_symlink("/proc/self/exe", error); !error)
    candidates.push_back(self.parent_path().parent_path() / DILOCO_CHAOS_INSTALLED_PLOT_SCRIPT);
  std::string looked;
  for (const fs::path& p : candidates) {
    if (fs::exists(p)) return p;
    looked += (looked.empty() ? "" : ", ") + p.string();
  }
  throw std::runtime_error("cannot find plot_timeline.py (looked for " + looked + ")");
}

/// Draws DIR/timeline.png from DIR/report.json with plot_timeline.py, run by the Python that CMake found with
/// matplotlib (else python3 from PATH); the script explains itself on stderr when it fails. Throws saying why
/// there is no picture.
void plot(const fs::path& dir, const std::string& title) {
  const std::string python = fs::exists(DILOCO_CHAOS_PYTHON) ? DILOCO_CHAOS_PYTHON : "python3";
  const fs::path script = plot_script();
  auto child = diloco_tools::child_process::spawn(
      {{python, script.string(), (dir / "report.json").string(), (dir / "timeline.png").string(), "--title", title}});
  const auto status = child.wait_for(std::chrono::minutes(2));
  if (!status) {
    child.kill_and_reap();
    throw std::runtime_error(script.string() + " took more than 2 minutes");
  }
  if (!status->exited || status->code != 0)
    throw std::runtime_error(python + " " + script.string() + " ended with " + status->to_string());
}

/// Reads DIR/events.jsonl, writes DIR/report.json and DIR/timeline.png,
/// prints the summary. Returns the exit status.
int report(const fs::path& dir, double bound, const std::string& title) {
  const auto trace = diloco_chaos::read_trace(dir / "events.jsonl");
  const auto r = diloco_chaos::analyze(trace, {.downtime_bound_s = bound});
  const std::string json = diloco_chaos::to_json(r);
  {
    std::ofstream out(dir / "report.json", std::ios::trunc);
    out << json;
    if (!out) throw std::runtime_error("cannot write " + (dir / "report.json").string());
  }
  std::string plot_error;
  try {
    plot(dir, title);
  } catch (const std::exception& e) {
    plot_error = e.what();
  }
  std::cout << json;
  for (const auto& f : r.failures) std::cerr << "diloco_chaos: FAILED: " << f << '\n';
  if (!plot_error.empty()) {
    std::cerr << "diloco_chaos: error: no timeline.png: " << plot_error << "; the report is in "
              << (dir / "report.json").string() << '\n';
    return 1;
  }
  std::cerr << "diloco_chaos: report in " << (dir / "report.json").string() << ", timeline in "
            << (dir / "timeline.png").string() << '\n';
  return r.ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace chaos = diloco_chaos;
  chaos::schedule_options plan;
  plan.quiet_start_seconds = plan.quiet_end_seconds = 10;
  std::string out, report_only, syncer, learner, title;
  double downtime_bound = 5.0;
  bool no_faults = false;

  CLI::App app{description, "diloco_chaos"};
  app.footer(placeholders);
  // A repeated option keeps its last value (--syncer-kill-at adds up), as it always did.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const auto non_negative = diloco_tools::non_negative(), positive = diloco_tools::positive();
  app.add_option("--out", out, "the run's directory")->type_name("DIR");
  app.add_option("--report", report_only, "analyze DIR/events.jsonl again (no run)")->type_name("DIR");
  app.add_option("--learners", plan.learners, "learner processes")
      ->type_name("M")
      ->check(diloco_tools::whole_at_least(1));
  app.add_option("--duration", plan.duration_seconds, "length of the run")->type_name("SEC")->check(positive);
  app.add_option("--syncer", syncer, "the syncer's command")->type_name("CMD");
  app.add_option("--learner", learner, "a learner's command")->type_name("CMD");
  app.add_option("--mtbf", plan.mtbf_seconds, "mean up-time of a learner between faults")
      ->type_name("SEC")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--recovery", plan.recovery_seconds, "how long a killed learner stays down or a paused one paused")
      ->type_name("SEC")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--pause-share", plan.pause_share, "share of faults that are SIGSTOP pauses rather than SIGKILLs")
      ->type_name("P")
      ->check(diloco_tools::in(diloco_tools::interval<double>{0, 1}))
      ->capture_default_str();
  app.add_option("--syncer-kill-at", plan.syncer_kills_at, "kill the syncer at these times (none)")
      ->type_name("S,..")
      ->delimiter(',')
      ->check(non_negative)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::vector<std::string> learner_kills;
  app.add_option("--learner-kill-at", learner_kills,
                 "kill these learners at these times instead of drawing faults (none), each back after --recovery")
      ->type_name("ID:SEC,..")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::uint32_t shards = 1, kill_shard = 0;
  app.add_option("--shards", shards, "syncer processes: the shards of a sharded syncer (1: not sharded)")
      ->type_name("N")
      ->check(diloco_tools::whole_at_least(1))
      ->capture_default_str();
  std::string kill_shard_text = "0";
  app.add_option("--kill-shard", kill_shard_text,
                 "with --shards: the shard the syncer faults hit, or 'each': the shards in turn")
      ->type_name("S")
      ->capture_default_str();
  app.add_option("--syncer-pause-at", plan.syncer_pauses_at,
                 "pause the syncer (SIGSTOP, SIGCONT after --syncer-recovery) at these times (none)")
      ->type_name("S,..")
      ->delimiter(',')
      ->check(non_negative)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  bool standby = false, lose_disk = false;
  std::string etcd_program;
  app.add_flag("--standby", standby,
               "each shard runs a primary and a standby syncer that lead it in turn through etcd (needs --etcd); "
               "a syncer fault hits the leader, and the faulted one starts again as a standby");
  app.add_option("--etcd", etcd_program, "with --standby: the etcd server program the run starts")
      ->type_name("PROGRAM");
  app.add_flag("--lose-disk", lose_disk, "with --standby: a syncer kill deletes the killed syncer's {state} too");
  app.add_option("--syncer-cut-at", plan.syncer_cuts_at,
                 "with --standby: cut the leading syncer off the network (--cut-command) at these times, and join it "
                 "again (--heal-command) after --syncer-recovery (none)")
      ->type_name("S,..")
      ->delimiter(',')
      ->check(non_negative)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::string cut_command, heal_command, syncer_host = "127.0.0.1", etcd_host = "127.0.0.1";
  app.add_option(
         "--cut-command", cut_command,
         "cuts syncer {shard} {slot} ({index}) off from etcd, the learners and the other syncers while it runs; "
         "run by the runner, must exit 0")
      ->type_name("CMD");
  app.add_option("--heal-command", heal_command, "joins the syncer cut off by --cut-command again")->type_name("CMD");
  app.add_option("--syncer-host", syncer_host, "the syncers' address, in their endpoints")
      ->type_name("HOST")
      ->capture_default_str();
  app.add_option("--etcd-host", etcd_host, "with --standby: the address the run's etcd serves at ({etcd})")
      ->type_name("HOST")
      ->capture_default_str();
  bool learners_finish = false;
  app.add_flag("--until-learners-finish", learners_finish,
               "the learners end by themselves (a step budget): one that exits with 0 has finished and is not "
               "restarted, and the run ends once all have (--duration: at the latest)");
  bool kill_rank = false;
  app.add_flag("--kill-rank", kill_rank,
               "a learner's command starts a unit of ranks (mpirun): a kill hits one of its ranks, and the "
               "launcher ends the unit");
  app.add_option("--syncer-recovery", plan.syncer_recovery_seconds, "how long the syncer stays down")
      ->type_name("SEC")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--quiet-start", plan.quiet_start_seconds, "no fault before")
      ->type_name("SEC")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--quiet-end", plan.quiet_end_seconds, "no fault in the last")
      ->type_name("SEC")
      ->check(non_negative)
      ->capture_default_str();
  app.add_flag("--no-faults", no_faults, "the same run without any fault (a baseline)");
  app.add_option("--seed", plan.seed, "seed of the fault schedule")
      ->type_name("N")
      ->check(diloco_tools::whole_at_least(0))
      ->capture_default_str();
  app.add_option("--downtime-bound", downtime_bound, "a gap between outer updates longer than this is downtime")
      ->type_name("SEC")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--title", title, "the timeline's title (words joined by '_' are shown with spaces)")
      ->type_name("TEXT");
  if (const auto status = diloco_tools::parse(app, argc, argv)) return *status;
  title = replace_all(title, "_", " ");

  try {
    if (!report_only.empty()) return report(report_only, downtime_bound, title.empty() ? report_only : title);
    if (out.empty() || syncer.empty() || learner.empty()) {
      std::fprintf(stderr, "diloco_chaos: --out, --syncer and --learner are required (diloco_chaos --help)\n");
      return diloco_tools::bad_usage;
    }
    // Names the option that makes no sense. Without faults only the learners
    // and the duration matter: the default quiet windows (10 s each) must not
    // refuse a baseline shorter than 20 s.
    for (const std::string& kill : learner_kills) plan.learner_kills_at.push_back(planned_kill(kill));
    chaos::schedule_options checked = plan;
    if (no_faults) {
      checked.quiet_start_seconds = checked.quiet_end_seconds = 0;
      checked.syncer_kills_at.clear();
      checked.learner_kills_at.clear();
    }
    checked.check();
    if (kill_shard_text == "each") {
      kill_shard = chaos::runner_options::every_shard;
    } else {
      const auto k = diloco_tools::number_in(kill_shard_text, diloco_tools::interval<std::uint32_t>{0});
      if (!k || *k >= shards) throw std::invalid_argument("--kill-shard must be 'each' or a shard below --shards");
      kill_shard = *k;
    }
    if (standby != !etcd_program.empty()) throw std::invalid_argument("--standby and --etcd go together");
    if (lose_disk && !standby) throw std::invalid_argument("--lose-disk needs --standby");
    if (!plan.syncer_pauses_at.empty() && !standby)
      throw std::invalid_argument("--syncer-pause-at needs --standby (a paused syncer without one only stalls)");
    if (!plan.syncer_cuts_at.empty() && (!standby || cut_command.empty() || heal_command.empty()))
      throw std::invalid_argument("--syncer-cut-at needs --standby, --cut-command and --heal-command");
    if (cut_command.empty() != heal_command.empty())
      throw std::invalid_argument("--cut-command and --heal-command go together");
#if !DILOCO_CHAOS_WITH_ETCD
    if (standby)
      throw std::invalid_argument("--standby needs a diloco_chaos built with diloco::etcd (DILOCO_WITH_ETCD)");
#endif
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "diloco_chaos: %s\n", e.what());
    return diloco_tools::bad_usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_chaos: error: %s\n", e.what());
    return 1;
  }

  try {
    const fs::path dir = out;
    fs::create_directories(dir);
    const auto events = dir / "events.jsonl";
    fs::remove(events);
    // Per shard and slot: where the syncer serves learners, and its replication stream.
    const std::uint32_t slots = standby ? 2 : 1;
    std::vector<std::vector<std::string>> endpoints(shards), ports(shards), replication(shards);
    std::string every_endpoint;
    // {shard}, {slot} and {index} of the syncer process in (shard, slot).
    const auto of_syncer = [&](std::string c, std::uint32_t shard, std::uint32_t slot) {
      c = replace_all(c, "{index}", std::to_string(shard * slots + slot));
      c = replace_all(c, "{slot}", std::string(1, static_cast<char>('a' + slot)));
      return replace_all(c, "{shard}", std::to_string(shard));
    };
    for (std::uint32_t i = 0; i < shards; ++i) {
      every_endpoint += i ? "," : "";
      for (std::uint32_t slot = 0; slot < slots; ++slot) {
        const std::string host = "tcp://" + of_syncer(syncer_host, i, slot) + ":";
        ports[i].push_back(std::to_string(diloco_tools::free_loopback_port()));
        endpoints[i].push_back(host + ports[i].back());
        replication[i].push_back(host + std::to_string(diloco_tools::free_loopback_port()));
        every_endpoint += (slot ? "|" : "") + endpoints[i].back();
      }
    }
    const auto state_of = [&](std::uint32_t shard, std::uint32_t slot) {
      return dir / "state" / ("syncer-" + std::to_string(shard) + "-" + static_cast<char>('a' + slot));
    };
    fs::remove_all(dir / "state");
#if DILOCO_CHAOS_WITH_ETCD
    std::optional<chaos::leaders> etcd;
    if (standby) {
      fs::create_directories(dir / "logs");
      etcd.emplace(etcd_program, dir / "etcd", dir / "logs" / "etcd.log", endpoints, etcd_host);
      std::cerr << "diloco_chaos: etcd at " << etcd->url() << '\n';
    }
    const std::string etcd_url = etcd ? etcd->url() : std::string();
#else
    const std::string etcd_url;
#endif
    const double stop_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
                           plan.duration_seconds;
    auto expand = [&](const std::string& command, const std::string& endpoint, const std::string& port) {
      std::string c = replace_all(command, "{endpoint}", endpoint);
      c = replace_all(c, "{port}", port);
      c = replace_all(c, "{trace}", events.string());
      c = replace_all(c, "{dir}", dir.string());
      char when[32];
      std::snprintf(when, sizeof when, "%.3f", stop_at);
      return replace_all(c, "{stop_at}", when);
    };
    chaos::runner_options o;
    o.learners = plan.learners;
    o.duration_seconds = plan.duration_seconds;
    if (!no_faults) o.faults = chaos::make_schedule(plan);
    o.learner_command = [&](std::uint32_t id, std::uint32_t incarnation) {
      std::string c = replace_all(expand(learner, every_endpoint, ports[0][0]), "{id}", std::to_string(id));
      return words(replace_all(c, "{incarnation}", std::to_string(incarnation)));
    };
    o.syncer_command = [&](std::uint32_t shard, std::uint32_t slot, std::uint32_t restart) {
      std::string c = expand(syncer, endpoints[shard][slot], ports[shard][slot]);
      c = replace_all(c, "{restart}", std::to_string(restart));
      c = replace_all(c, "{shards}", std::to_string(shards));
      c = replace_all(c, "{etcd}", etcd_url);
      c = replace_all(c, "{replication}", replication[shard][slot]);
      c = replace_all(c, "{state}", state_of(shard, slot).string());
      return words(of_syncer(c, shard, slot));
    };
    if (!cut_command.empty())
      o.cut_network = [&](std::uint32_t shard, std::uint32_t slot, bool cut) {
        const auto command = words(of_syncer(cut ? cut_command : heal_command, shard, slot));
        const auto log = dir / "logs" / "network.log";
        auto p = diloco_tools::child_process::spawn({command, log, log});
        const auto s = p.wait_for(std::chrono::seconds(30));
        if (!s || !s->exited || s->code != 0)
          throw std::runtime_error(std::string(cut ? "--cut-command" : "--heal-command") + " failed (" +
                                   (s ? s->to_string() : "still running after 30 s") + "; see " + log.string() + ")");
      };
    o.shards = shards;
    o.slots = slots;
#if DILOCO_CHAOS_WITH_ETCD
    if (etcd) o.leader_slot = [&](std::uint32_t shard) { return etcd->leader_slot(shard); };
#endif
    if (lose_disk)
      o.lose_disk = [&](std::uint32_t shard, std::uint32_t slot) { fs::remove_all(state_of(shard, slot)); };
    o.kill_shard = kill_shard;
    o.kill_rank = kill_rank;
    o.learners_finish = learners_finish;
    o.log_dir = dir / "logs";
    const std::string name = title.empty() ? dir.filename().string() : title;
    o.begin_fields = {{"mode", name}, {"seed", plan.seed}};
    if (standby) o.begin_fields["standby"] = true;
    if (!no_faults) o.begin_fields.update({{"mtbf_s", plan.mtbf_seconds}, {"recovery_s", plan.recovery_seconds}});
    o.log = [](const std::string& line) { std::cerr << "diloco_chaos: " << line << '\n'; };
    const auto counts = chaos::count_faults(o.faults);
    std::cerr << "diloco_chaos: " << plan.learners << " learners for " << plan.duration_seconds << " s on "
              << every_endpoint << "; scheduled " << counts.kills << " kills, " << counts.pauses << " pauses, "
              << counts.syncer_kills << " syncer kills, " << counts.syncer_pauses << " syncer pauses, "
              << counts.syncer_cuts << " syncer cuts\n";
    diloco::trace_writer trace(events);
    const auto r = chaos::run(o, trace);
    std::cerr << "diloco_chaos: done: " << r.learner_kills << " learner kills, " << r.learner_pauses << " pauses, "
              << r.learner_restarts << " restarts, " << r.finished << " finished, " << r.syncer_kills
              << " syncer kills, " << r.syncer_cuts << " syncer cuts, " << r.syncer_pauses << " syncer pauses ("
              << r.stepped_down << " stepped down, " << r.skipped_faults << " found no leader); " << r.unexpected_exits
              << " unexpected exits, " << r.killed_at_end << " killed at the end\n";
    const int status = report(dir, downtime_bound, name);
    if (r.unexpected_exits || r.killed_at_end) {
      std::cerr << "diloco_chaos: FAILED: processes ended on their own or had to be killed at the end (see "
                << o.log_dir.string() << ")\n";
      return 1;
    }
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_chaos: error: %s\n", e.what());
    return 1;
  }
}
