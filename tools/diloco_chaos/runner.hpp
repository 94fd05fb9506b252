// The chaos runner: starts a syncer (or the S shards of one) and M learner
// processes, and on a fault schedule kills them (SIGKILL), pauses them
// (SIGSTOP, then SIGCONT), cuts a syncer off the network and joins it again,
// and starts them again, learners with a new incarnation each time. Every action
// and every exit goes to the run's trace (docs/chaos.md), stamped with the
// wall clock, next to what the processes themselves record. POSIX only.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <diloco/metrics/trace.hpp>
#include <diloco_tools/json.hpp>
#include <diloco_tools/process.hpp>
#include <nlohmann/json.hpp>

#include "schedule.hpp"

namespace diloco_chaos {

using diloco_tools::child_process;
using diloco_tools::exit_status;

/// The processes below `root` that have no children of their own (Linux:
/// from /proc/PID/stat), in ascending pid order: under a launcher such as
/// `mpirun`, a learner unit's ranks. Empty when there are none.
inline std::vector<pid_t> descendant_leaves(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;  // ended meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid) parent_of.emplace_back(static_cast<pid_t>(std::stol(name)), ppid);
  }
  std::vector<pid_t> below{root}, leaves;
  for (std::size_t k = 0; k < below.size(); ++k) {
    bool has_children = false;
    for (const auto& [pid, ppid] : parent_of)
      if (ppid == below[k]) {
        below.push_back(pid);
        has_children = true;
      }
    if (!has_children && k > 0) leaves.push_back(below[k]);
  }
  std::sort(leaves.begin(), leaves.end());
  return leaves;
}

/// What to run and how it fails. Times in seconds from the start of the run.
struct runner_options {
  std::uint32_t learners = 0;
  double duration_seconds = 0;  ///< learners are told to finish then (their command's business)
  /// Learners end by themselves once their work is done (a step budget): one
  /// that exits with status 0 before the end has finished — it is not
  /// started again, its time from then is not allocated — and the run ends
  /// once every learner has finished, or at `duration_seconds`. A syncer
  /// that ends cleanly once learners have finished (they left, and it ends
  /// the run) is not started again either.
  bool learners_finish = false;
  schedule faults;  ///< `make_schedule`, or empty for a run without faults
  /// The command of learner `id`'s `incarnation`-th process (from 1).
  std::function<std::vector<std::string>(std::uint32_t id, std::uint32_t incarnation)> learner_command;
  /// The command of syncer shard `shard` (0 when not sharded) in slot `slot`
  /// (0, or 0 and 1 with a standby); `restart` is 0 for the first start.
  std::function<std::vector<std::string>(std::uint32_t shard, std::uint32_t slot, std::uint32_t restart)>
      syncer_command;
  /// Syncer processes: 1, or the S shards of a sharded syncer (docs/design.md,
  /// "Sharded syncer"). The schedule's syncer faults hit shard `kill_shard`,
  /// or with `every_shard` the shards in turn.
  std::uint32_t shards = 1;
  std::uint32_t kill_shard = 0;
  static constexpr std::uint32_t every_shard = UINT32_MAX;
  /// Syncer processes per shard: 1, or 2 where each shard has a standby that
  /// takes over through etcd (docs/chaos.md). A syncer fault then hits the
  /// shard's leader, which `leader_slot` names (nothing: none leads now,
  /// and the fault is skipped); a leader that comes back from a pause past
  /// its lease steps down (exit status 4) and starts again as a standby.
  std::uint32_t slots = 1;
  std::function<std::optional<std::uint32_t>(std::uint32_t shard)> leader_slot;
  /// With `slots` > 1, called after a syncer kill: the killed process's disk
  /// is lost too (its checkpoint directory deleted). Nothing when empty.
  std::function<void(std::uint32_t shard, std::uint32_t slot)> lose_disk;
  /// With `slots` > 1: cuts the syncer process of (shard, slot) off from
  /// etcd, the learners and the other syncers while it runs (`cut` true),
  /// or joins it again (false); throws if it cannot. Needed by cut faults.
  /// A syncer that steps down while cut off starts again once joined.
  std::function<void(std::uint32_t shard, std::uint32_t slot, bool cut)> cut_network;
  /// A learner's command starts a unit of ranks under a launcher (`mpirun`):
  /// a kill hits one rank (`descendant_leaves`, the lowest pid) and the
  /// launcher ends the unit, which stays down from then until its restart.
  bool kill_rank = false;
  double unit_end_seconds = 30;   ///< a unit still up this long after its rank's kill is killed whole
  std::filesystem::path log_dir;  ///< each process's stdout and stderr go to a file here
  /// After `duration_seconds`: how long learners get to finish by themselves
  /// before they are killed, and the syncer to stop after SIGTERM.
  double drain_seconds = 30;
  double tick_seconds = 0.01;  ///< how often the runner looks at the schedule and its children
  nlohmann::ordered_json begin_fields = nlohmann::ordered_json::object();  ///< more fields for the trace's "begin" line
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

/// What happened, besides the trace.
struct runner_result {
  std::uint32_t learner_kills = 0, learner_pauses = 0, learner_restarts = 0, syncer_kills = 0, syncer_pauses = 0;
  std::uint32_t syncer_cuts = 0;
  std::uint32_t finished = 0;          ///< learners that finished by themselves (`learners_finish`)
  std::uint32_t stepped_down = 0;      ///< syncers that exited with status 4, having lost their lease
  std::uint32_t skipped_faults = 0;    ///< syncer faults that found no leader to hit
  std::uint32_t unexpected_exits = 0;  ///< processes that ended on their own before the end, or not with 0
  std::uint32_t killed_at_end = 0;     ///< processes that did not finish within `drain_seconds`
};

/// Runs the whole schedule; returns when every process has ended. Blocks for
/// about `duration_seconds` plus the drain. Throws if a process cannot start.
inline runner_result run(const runner_options& o, diloco::trace_writer& trace) {
  using steady = std::chrono::steady_clock;
  using json = nlohmann::ordered_json;
  const auto begin = steady::now();
  auto at = [&](double s) {
    return begin + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
  };
  auto elapsed = [&] { return std::chrono::duration<double>(steady::now() - begin).count(); };
  runner_result result;
  std::filesystem::create_directories(o.log_dir);

  struct member {
    std::string name;  ///< "learner 3", "syncer", "syncer 1" (a shard)
    json fields;  ///< "target" and, for a learner, "learner" (a shard: "shard"): the first fields of its trace lines
    std::optional<child_process> process;
    std::uint32_t starts = 0;
    std::optional<double> restart_at;      ///< down: when it starts again
    std::optional<double> resume_at;       ///< paused (SIGSTOP): when it gets SIGCONT
    std::optional<double> rank_killed_at;  ///< a unit whose rank was killed: its launcher ends it
    std::optional<double> heal_at;         ///< a syncer cut off from the network: when it is joined again
  };
  const std::uint32_t everyone = o.learners + o.shards * o.slots;
  std::vector<member> members(everyone);  // learners, then the syncer's shards, each in its slots
  const auto is_syncer = [&](std::uint32_t i) { return i >= o.learners; };
  const auto shard_of = [&](std::uint32_t i) { return (i - o.learners) / o.slots; };
  const auto slot_of = [&](std::uint32_t i) { return (i - o.learners) % o.slots; };
  // "syncer", "syncer 1" (a shard), "syncer 1b" (its slot b): as the trace and the log files name them.
  const auto syncer_name = [&](std::uint32_t i, const char* space) {
    std::string name = "syncer";
    if (o.shards > 1 || o.slots > 1) name += space;
    if (o.shards > 1) name += std::to_string(shard_of(i));
    if (o.slots > 1) name += static_cast<char>('a' + slot_of(i));
    return name;
  };
  for (std::uint32_t i = 0; i < everyone; ++i) {
    auto& m = members[i];
    if (!is_syncer(i)) {
      m.name = std::string("learner ").append(std::to_string(i));
      m.fields = json{{"target", "learner"}, {"learner", i}};
      continue;
    }
    m.name = syncer_name(i, " ");
    m.fields = json{{"target", "syncer"}};
    if (o.shards > 1) m.fields["shard"] = shard_of(i);
    if (o.slots > 1) m.fields["slot"] = std::string(1, static_cast<char>('a' + slot_of(i)));
  }
  auto record = [&](member& m, const char* ev, const json& extra = json::object()) {
    json fields = m.fields;
    if (m.process) fields["pid"] = m.process->pid();
    std::string line = ev;
    line.append(" ").append(m.name);
    for (const auto& [key, field] : extra.items()) {
      fields[key] = field;
      line.append(" ").append(key).append("=").append(field.is_string() ? field.get<std::string>() : field.dump());
    }
    trace.write("runner", ev, diloco_tools::trace_fields(fields));
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%8.3f s: ", elapsed());
    o.log(stamp + line);
  };
  auto start = [&](std::uint32_t i) {
    auto& m = members[i];
    const bool syncer = is_syncer(i);
    const std::uint32_t n = ++m.starts;
    const auto argv = syncer ? o.syncer_command(shard_of(i), slot_of(i), n - 1) : o.learner_command(i, n);
    std::string file = !syncer ? std::string("learner").append(std::to_string(i)) : syncer_name(i, "");
    const auto log = o.log_dir / file.append("-").append(std::to_string(n)).append(".log");
    m.process = child_process::spawn({argv, log, log});
    m.resume_at.reset();
    m.restart_at.reset();
    if (n > 1 && !syncer) ++result.learner_restarts;
    record(m, "spawn", syncer ? json::object() : json{{"incarnation", n}});
  };
  auto reaped = [&](member& m, const exit_status& s) {
    record(m, "exit", {{"status", s.to_string()}});
    m.process.reset();
  };
  auto kill = [&](member& m) {
    if (!m.process) return;
    record(m, "kill");
    reaped(m, m.process->kill_and_reap());
  };
  auto heal = [&](std::uint32_t i) {
    o.cut_network(shard_of(i), slot_of(i), false);
    members[i].heal_at.reset();
    record(members[i], "heal");
  };

  {
    json fields = {{"learners", o.learners}, {"duration_s", o.duration_seconds}};
    for (const auto& [key, field] : o.begin_fields.items()) fields[key] = field;
    trace.write("runner", "begin", diloco_tools::trace_fields(fields));
  }
  for (std::uint32_t i = o.learners; i < everyone; ++i) start(i);
  for (std::uint32_t i = 0; i < o.learners; ++i) start(i);

  std::size_t next_fault = 0, next_syncer_fault = 0;
  while (elapsed() < o.duration_seconds && !(o.learners_finish && result.finished == o.learners)) {
    const double now = elapsed();
    for (; next_fault < o.faults.learner_faults.size() && o.faults.learner_faults[next_fault].at_seconds <= now;
         ++next_fault) {
      const auto& f = o.faults.learner_faults[next_fault];
      auto& m = members.at(f.learner);
      if (!m.process || m.resume_at) continue;  // already down: the schedule keeps them apart, a slow start may not
      if (f.kind == fault_kind::kill) {
        const auto ranks = o.kill_rank ? descendant_leaves(m.process->pid()) : std::vector<pid_t>{};
        if (ranks.empty()) {
          kill(m);
        } else {  // the unit ends by itself, below
          record(m, "kill", {{"rank_pid", ranks.front()}});
          ::kill(ranks.front(), SIGKILL);
          m.rank_killed_at = now;
        }
        ++result.learner_kills;
        m.restart_at = now + f.recovery_seconds;
      } else {
        m.process->signal(SIGSTOP);
        record(m, "pause");
        ++result.learner_pauses;
        m.resume_at = now + f.recovery_seconds;
      }
    }
    for (; next_syncer_fault < o.faults.syncer_faults.size() &&
           o.faults.syncer_faults[next_syncer_fault].at_seconds <= now;
         ++next_syncer_fault) {
      const auto& f = o.faults.syncer_faults[next_syncer_fault];
      const std::uint32_t shard = o.kill_shard == runner_options::every_shard
                                      ? static_cast<std::uint32_t>(next_syncer_fault % o.shards)
                                      : o.kill_shard;
      std::optional<std::uint32_t> slot = 0;
      if (o.slots > 1) slot = o.leader_slot ? o.leader_slot(shard) : std::nullopt;
      auto* m = slot ? &members[o.learners + shard * o.slots + *slot] : nullptr;
      if (!m || !m->process || m->resume_at || m->heal_at) {
        ++result.skipped_faults;
        trace.write("runner", "skip", diloco_tools::trace_fields(json{{"target", "syncer"}, {"shard", shard}}));
        o.log("no leading syncer of shard " + std::to_string(shard) + " to hit: fault skipped");
        continue;
      }
      if (f.kind == fault_kind::kill) {
        kill(*m);
        ++result.syncer_kills;
        if (o.lose_disk) {
          o.lose_disk(shard, *slot);
          record(*m, "lose_disk");
        }
        m->restart_at = now + f.recovery_seconds;
      } else if (f.kind == fault_kind::cut) {
        o.cut_network(shard, *slot, true);
        record(*m, "cut");
        ++result.syncer_cuts;
        m->heal_at = now + f.recovery_seconds;
      } else {
        m->process->signal(SIGSTOP);
        record(*m, "pause");
        ++result.syncer_pauses;
        m->resume_at = now + f.recovery_seconds;
      }
    }
    for (std::uint32_t i = 0; i < everyone; ++i) {
      auto& m = members[i];
      if (m.resume_at && now >= *m.resume_at) {
        m.process->signal(SIGCONT);
        m.resume_at.reset();
        record(m, "resume");
      }
      if (m.heal_at && now >= *m.heal_at) heal(i);
      if (!m.process && m.restart_at && now >= *m.restart_at && !m.heal_at) start(i);
      if (m.process && m.rank_killed_at) {  // a unit that lost a rank: ended by its launcher
        if (auto s = m.process->poll()) {
          reaped(m, *s);
          m.rank_killed_at.reset();
        } else if (now - *m.rank_killed_at > o.unit_end_seconds) {
          ++result.unexpected_exits;
          kill(m);
          m.rank_killed_at.reset();
        }
      } else if (m.process) {
        if (auto s = m.process->poll(); s && !is_syncer(i) && o.learners_finish && s->exited && s->code == 0) {
          ++result.finished;  // its steps done: it stays down, and the run may end early
          record(m, "finish", {{"status", s->to_string()}});
          m.process.reset();
        } else if (s && is_syncer(i) && o.learners_finish && result.finished > 0 && s->exited && s->code == 0) {
          reaped(m, *s);  // the learners said goodbye: the syncer ended the run, as it does
        } else if (s) {   // ended by itself before the end of the run
          // A leader back from a pause past its lease steps down: expected where there is a standby.
          const bool stepped_down = is_syncer(i) && o.slots > 1 && s->exited && s->code == 4;
          ++(stepped_down ? result.stepped_down : result.unexpected_exits);
          reaped(m, *s);
          m.restart_at = now + 1.0;
        }
      }
    }
    std::this_thread::sleep_until(std::min(
        at(o.duration_seconds),
        steady::now() + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(o.tick_seconds))));
  }

  // The end: learners finish by themselves (final contributions, leave),
  // then the syncer is asked to stop and merges what is open.
  trace.write("runner", "stopping");
  for (std::uint32_t i = o.learners; i < everyone; ++i)
    if (members[i].heal_at) heal(i);
  for (std::uint32_t i = 0; i < o.learners; ++i)
    if (members[i].resume_at) {
      members[i].process->signal(SIGCONT);
      members[i].resume_at.reset();
      record(members[i], "resume");
    }
  const auto drain =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(o.drain_seconds));
  const auto drain_end = steady::now() + drain;
  for (std::uint32_t i = 0; i < o.learners; ++i) {
    auto& m = members[i];
    if (!m.process) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_end - steady::now());
    if (auto s = m.process->wait_for(std::max(left, std::chrono::milliseconds(0)))) {
      if (!s->exited || s->code != 0) ++result.unexpected_exits;
      reaped(m, *s);
    } else {
      ++result.killed_at_end;
      kill(m);
    }
  }
  // Standbys first: a leader that ends cleanly gives its leadership up,
  // and a standby still there would take it over.
  std::vector<bool> leads(everyone, true);
  if (o.slots > 1)
    for (std::uint32_t i = o.learners; i < everyone; ++i) {
      const auto slot = o.leader_slot ? o.leader_slot(shard_of(i)) : std::nullopt;
      leads[i] = slot && *slot == slot_of(i);
    }
  for (const bool leaders : {false, true}) {
    for (std::uint32_t i = o.learners; i < everyone; ++i)
      if (members[i].process && leads[i] == leaders) {
        if (members[i].resume_at) members[i].process->signal(SIGCONT);
        members[i].resume_at.reset();
        members[i].process->signal(SIGTERM);
        record(members[i], "terminate");
      }
    for (std::uint32_t i = o.learners; i < everyone; ++i) {
      auto& syncer = members[i];
      if (!syncer.process || leads[i] != leaders) continue;
      if (auto s = syncer.process->wait_for(drain)) {
        const bool stepped_down = o.slots > 1 && s->exited && s->code == 4;
        if (!stepped_down && (!s->exited || s->code != 0)) ++result.unexpected_exits;
        reaped(syncer, *s);
      } else {
        ++result.killed_at_end;
        kill(syncer);
      }
    }
  }
  trace.write("runner", "end");
  return result;
}

}  // namespace diloco_chaos
