// The benchmarks' JSON output: nlohmann/json, fields in the order written.
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

namespace bench {

using json = nlohmann::ordered_json;

/// `v` rounded to `decimals` places: timings are no more precise. NaN stays
/// NaN, which nlohmann/json writes as null.
inline double rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(v) ? std::round(v * scale) / scale : v;
}

}  // namespace bench
