// An example trainer's run on threads: the syncer on one, each learner on
// its own, progress printed by the thread that waits for them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <example_trainer/progress.hpp>

namespace example_trainer {

/// Runs `sync` (its `run(std::stop_token)`) on a thread of its own and
/// `drive(i)` for each learner i < `learners` on one thread each, printing
/// progress while they run. `drive` returns an error message, empty for
/// none; an exception it throws (a GPU learner's device lost, say) counts as
/// one. Once every learner is done, the syncer handles what is queued and
/// stops. Returns the last error a learner reported, empty if none did.
template <class Syncer, class Drive>
std::string run_on_threads(Syncer& sync, std::uint32_t learners, Drive drive, progress& report) {
  std::mutex error_mutex;
  std::string error;
  std::atomic<std::uint32_t> finished{0};
  std::jthread syncer_thread([&sync](std::stop_token stop) { sync.run(stop); });
  {
    std::vector<std::jthread> threads;
    for (std::uint32_t i = 0; i < learners; ++i)
      threads.emplace_back([&, i] {
        std::string why;
        try {
          why = drive(i);
        } catch (const std::exception& e) {
          why = "learner " + std::to_string(i) + ": " + e.what();
        }
        if (!why.empty()) {
          std::lock_guard lock(error_mutex);
          error = std::move(why);
        }
        finished.fetch_add(1);
      });
    while (finished.load() < learners) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      report.maybe_print();
    }
  }  // joins the learner threads
  // Every learner has sent its last contribution and left; the syncer
  // handles what is queued, flushes and stops.
  syncer_thread.request_stop();
  syncer_thread.join();
  return error;
}

}  // namespace example_trainer
