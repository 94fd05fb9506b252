// The clock every deadline, timeout and arrival time of the library is read
// from: monotonic, so a wall-clock change never fires or stalls a timer.
#pragma once

#include <chrono>

namespace diloco {

using clock = std::chrono::steady_clock;
using time_point = clock::time_point;

}  // namespace diloco
