// This process's memory as Linux reports it, and a bounded wait: what the
// tests that hold a transport or a syncer to a memory bound measure
// (tests/transport/*_budget.cpp, tests/support/adversary_harness.hpp).
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace process_memory {

/// Whether this build's resident memory measures what the program holds: not
/// under AddressSanitizer, whose quarantine keeps freed memory (and whose
/// shadow grows with what was ever touched), nor ThreadSanitizer. Tests
/// bound RSS only where it does; the sanitizer builds still check the
/// byte counts a transport keeps.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool rss_measures_the_program = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool rss_measures_the_program = false;
#else
inline constexpr bool rss_measures_the_program = true;
#endif
#else
inline constexpr bool rss_measures_the_program = true;
#endif

/// A line of /proc/self/status in KiB ("VmRSS", "VmHWM"), 0 if unreadable.
inline long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return 0;
}

/// Resets VmHWM to the current RSS (Linux ≥ 4.0); false where refused.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

/// VmRSS once malloc has given its free pages back (glibc): memory in use,
/// not what malloc keeps of connections that came and went.
inline long resident_kib() {
#if defined(__GLIBC__)
  (void)malloc_trim(0);
#endif
  return status_kib("VmRSS");
}

constexpr double mib(long kib) { return double(kib) / 1024.0; }

/// Waits up to `limit` for `done`, checking every 2 ms; its last value.
inline bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace process_memory
