// diloco_goodput: the goodput and uptime of data parallel, elastic data
// parallel and Decoupled DiLoCo on up to billions of chips that fail as
// Poisson processes, by discrete-event simulation (docs/goodput.md).
//
//   diloco_goodput --method decoupled --chips 1200000 --learners 8 --quorum 1 --json

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command_line.hpp"
#include "simulator.hpp"

namespace {

/// `x` to 6 significant digits (0.8812, not 0.88119999999999998).
double rounded(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", x);
  return std::strtod(b, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  namespace goodput = diloco_goodput;
  goodput::command c;
  if (const auto status = goodput::parse_command_line(argc, argv, c)) return *status;
  const goodput::run_options& o = c.run;
  goodput::result r;
  try {
    r = goodput::simulate(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_goodput: error: %s\n", e.what());
    return 1;
  }
  const double days = r.simulated_s / 86400.0;
  std::printf("%s, %llu chips", goodput::method_name(o.kind), static_cast<unsigned long long>(o.chips));
  if (o.kind == goodput::method::decoupled) std::printf(", %u learners, quorum %u", o.learners, o.quorum);
  if (o.kind == goodput::method::elastic)
    std::printf(", %llu slice%s", static_cast<unsigned long long>(r.slices), r.slices == 1 ? "" : "s");
  std::printf(": goodput %.1f %% (standard error %.2f), uptime %.2f %% over %.1f simulated days, %llu failures\n",
              100 * r.goodput, 100 * r.goodput_se, 100 * r.uptime, days, static_cast<unsigned long long>(r.failures));
  if (c.json) {
    const goodput::model_options& m = o.model;
    nlohmann::ordered_json j{{"method", goodput::method_name(o.kind)},
                             {"chips", o.chips},
                             {"learners", o.learners},
                             {"quorum", o.quorum},
                             {"mtbi_years", m.chip_mtbi_years},
                             {"seed", o.seed},
                             {"goodput", rounded(r.goodput)},
                             {"goodput_se", rounded(r.goodput_se)},
                             {"uptime", rounded(r.uptime)},
                             {"simulated_days", rounded(days)},
                             {"events", r.events},
                             {"failures", r.failures}};
    switch (o.kind) {
      case goodput::method::data_parallel:
        j["recovery_s"] = m.recovery_s;
        j["checkpoint_s"] = m.checkpoint_interval_s;
        break;
      case goodput::method::elastic:
        j["slices"] = r.slices;
        j["slice_chips"] = m.slice_chips;
        j["downscale_s"] = m.downscale_s;
        j["upscale_s"] = m.upscale_s;
        j["repair_s"] = m.repair_s;
        break;
      case goodput::method::decoupled:
        j["restart_s"] = m.restart_s;
        j["contribution_s"] = m.contribution_interval_s;
        j["speed_spread"] = m.speed_spread;
        break;
    }
    std::cout << j.dump() << '\n';
  }
  return 0;
}
