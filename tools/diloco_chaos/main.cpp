// diloco_chaos: runs a syncer and M learner processes under a seeded fault
// schedule (SIGKILL, SIGSTOP/SIGCONT, restarts), then reports goodput, global
// downtime, what became of every contribution, and whether any learner saw a
// revision go backwards (docs/chaos.md).
//
// examples/01_fashion_mnist/chaos.py shows how to call it; docs/chaos.md
// describes the trace and the report.

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runner.hpp"
#include <diloco_tools/loopback.hpp>

#include "report.hpp"
#include "timeline.hpp"

namespace {

constexpr const char* usage = R"(usage: diloco_chaos --out DIR --learners M --duration SEC --syncer CMD --learner CMD [options]
       diloco_chaos --report DIR [--downtime-bound SEC]

Starts the syncer command and M learner commands, injects faults on a seeded
schedule, and writes DIR/events.jsonl (everything that happened), DIR/logs/
(each process's output), DIR/report.json and DIR/timeline.png. Exit status 0
when the run's invariants hold, 1 when one fails, 2 for bad usage.

Commands are split at spaces (no quoting); these words are replaced:
  {endpoint}     tcp://127.0.0.1:PORT, a free loopback port, the same for every restart
  {trace}        DIR/events.jsonl, which every process appends to
  {dir}          DIR
  {id} {incarnation}   learners: which learner, and its process count from 1
  {stop_at}      learners: the wall time (s since the epoch) at which to finish
  {restart}      the syncer: 0, then 1, 2, ... after each kill

  --mtbf SEC            mean up-time of a learner between faults (60)
  --recovery SEC        how long a killed learner stays down or a paused one paused (10)
  --pause-share P       share of faults that are SIGSTOP pauses rather than SIGKILLs (0.5)
  --syncer-kill-at S,.. kill the syncer at these times (none)
  --syncer-recovery SEC how long the syncer stays down (2)
  --quiet-start SEC     no fault before (10); --quiet-end SEC: none in the last (10)
  --no-faults           the same run without any fault (a baseline)
  --seed N              seed of the fault schedule (1)
  --downtime-bound SEC  a gap between outer updates longer than this is downtime (5)
  --title TEXT          the timeline's title (words joined by '_' are shown with spaces)
)";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double seconds(std::string_view option, const std::string& text) {
  std::istringstream in(text);
  double v = 0;
  if (!(in >> v) || !in.eof() || !std::isfinite(v) || v < 0)
    throw usage_error("bad value '" + text + "' for " + std::string(option));
  return v;
}

std::vector<std::string> words(const std::string& command) {
  std::istringstream in(command);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

/// Reads DIR/events.jsonl, writes DIR/report.json and DIR/timeline.png,
/// prints the summary. Returns the exit status.
int report(const std::filesystem::path& dir, double bound, const std::string& title) {
  const auto trace = diloco_chaos::read_trace(dir / "events.jsonl");
  const auto r = diloco_chaos::analyze(trace, {.downtime_bound_s = bound});
  {
    std::ofstream out(dir / "report.json", std::ios::trunc);
    out << diloco_chaos::to_json(r) << '\n';
    if (!out) throw std::runtime_error("cannot write " + (dir / "report.json").string());
  }
  diloco_chaos::render(diloco_chaos::to_timeline(r, title)).write_png(dir / "timeline.png");
  std::cout << diloco_chaos::to_json(r) << '\n';
  for (const auto& f : r.failures) std::cerr << "diloco_chaos: FAILED: " << f << '\n';
  std::cerr << "diloco_chaos: report in " << (dir / "report.json").string() << ", timeline in "
            << (dir / "timeline.png").string() << '\n';
  return r.ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace chaos = diloco_chaos;
  chaos::schedule_options plan;
  plan.quiet_start_seconds = plan.quiet_end_seconds = 10;
  std::filesystem::path out, report_only;
  std::string syncer, learner, title;
  double bound = 5.0;
  bool no_faults = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view opt = argv[i];
      if (opt == "--help" || opt == "-h") {
        std::fputs(usage, stdout);
        return 0;
      }
      if (opt == "--no-faults") {
        no_faults = true;
        continue;
      }
      if (i + 1 >= argc) throw usage_error(std::string(opt) + " needs a value");
      const std::string v = argv[++i];
      if (opt == "--out") out = v;
      else if (opt == "--report") report_only = v;
      else if (opt == "--learners") plan.learners = static_cast<std::uint32_t>(seconds(opt, v));
      else if (opt == "--duration") plan.duration_seconds = seconds(opt, v);
      else if (opt == "--mtbf") plan.mtbf_seconds = seconds(opt, v);
      else if (opt == "--recovery") plan.recovery_seconds = seconds(opt, v);
      else if (opt == "--pause-share") plan.pause_share = seconds(opt, v);
      else if (opt == "--syncer-recovery") plan.syncer_recovery_seconds = seconds(opt, v);
      else if (opt == "--quiet-start") plan.quiet_start_seconds = seconds(opt, v);
      else if (opt == "--quiet-end") plan.quiet_end_seconds = seconds(opt, v);
      else if (opt == "--seed") plan.seed = static_cast<std::uint64_t>(seconds(opt, v));
      else if (opt == "--downtime-bound") bound = seconds(opt, v);
      else if (opt == "--title") title = replace_all(v, "_", " ");
      else if (opt == "--syncer") syncer = v;
      else if (opt == "--learner") learner = v;
      else if (opt == "--syncer-kill-at") {
        std::istringstream in(v);
        for (std::string t; std::getline(in, t, ',');) plan.syncer_kills_at.push_back(seconds(opt, t));
      } else {
        throw usage_error("unknown option '" + std::string(opt) + "'");
      }
    }
    if (!report_only.empty()) return report(report_only, bound, title.empty() ? report_only.string() : title);
    if (out.empty() || syncer.empty() || learner.empty())
      throw usage_error("--out, --syncer and --learner are required");
    plan.check();  // names the option that makes no sense
  } catch (const usage_error& e) {
    std::fprintf(stderr, "diloco_chaos: %s\n\n%s", e.what(), usage);
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "diloco_chaos: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_chaos: error: %s\n", e.what());
    return 1;
  }

  try {
    std::filesystem::create_directories(out);
    const auto events = out / "events.jsonl";
    std::filesystem::remove(events);
    const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port());
    const double stop_at =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
        plan.duration_seconds;
    auto expand = [&](const std::string& command) {
      std::string c = replace_all(command, "{endpoint}", endpoint);
      c = replace_all(c, "{trace}", events.string());
      c = replace_all(c, "{dir}", out.string());
      char when[32];
      std::snprintf(when, sizeof when, "%.3f", stop_at);
      return replace_all(c, "{stop_at}", when);
    };
    chaos::runner_options o;
    o.learners = plan.learners;
    o.duration_seconds = plan.duration_seconds;
    if (!no_faults) o.faults = chaos::make_schedule(plan);
    o.learner_command = [&](std::uint32_t id, std::uint32_t incarnation) {
      std::string c = replace_all(expand(learner), "{id}", std::to_string(id));
      return words(replace_all(c, "{incarnation}", std::to_string(incarnation)));
    };
    o.syncer_command = [&](std::uint32_t restart) {
      return words(replace_all(expand(syncer), "{restart}", std::to_string(restart)));
    };
    o.log_dir = out / "logs";
    {
      std::ostringstream f;
      f << ",\"mode\":\"" << (title.empty() ? out.filename().string() : title) << "\",\"seed\":" << plan.seed;
      if (!no_faults) f << ",\"mtbf_s\":" << plan.mtbf_seconds << ",\"recovery_s\":" << plan.recovery_seconds;
      o.begin_fields = f.str();
    }
    o.log = [](const std::string& line) { std::cerr << "diloco_chaos: " << line << '\n'; };
    const auto counts = chaos::count_faults(o.faults);
    std::cerr << "diloco_chaos: " << plan.learners << " learners for " << plan.duration_seconds << " s on " << endpoint
              << "; scheduled " << counts.kills << " kills, " << counts.pauses << " pauses, " << counts.syncer_kills
              << " syncer kills\n";
    diloco::trace_writer trace(events);
    const auto r = chaos::run(o, trace);
    std::cerr << "diloco_chaos: done: " << r.learner_kills << " learner kills, " << r.learner_pauses << " pauses, "
              << r.learner_restarts << " restarts, " << r.syncer_kills << " syncer kills; " << r.unexpected_exits
              << " unexpected exits, " << r.killed_at_end << " killed at the end\n";
    const int status = report(out, bound, title.empty() ? out.filename().string() : title);
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
