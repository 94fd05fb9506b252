// A log that never blocks the syncer: lines go into a bounded queue that a
// thread of their own writes out. A reader that stops reading (a full pipe, a
// stalled terminal) stalls that thread only; once the queue is full, further
// lines are counted and dropped, and the count is written when there is room.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace diloco_syncer {

class log_sink {
 public:
  /// Writes to file descriptor `fd` (not owned); keeps at most `capacity` lines.
  explicit log_sink(int fd, std::size_t capacity = 4096) : fd_(fd), capacity_(capacity) {
    writer_ = std::thread([this] { drain(); });
  }

  /// Waits up to `linger` for queued lines to be written; a writer still
  /// stuck in `write` after that is left behind (the process is ending).
  ~log_sink() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_one();
    std::unique_lock lock(mutex_);
    const bool drained = done_.wait_for(lock, linger, [this] { return finished_; });
    lock.unlock();
    if (drained)
      writer_.join();
    else
      writer_.detach();
  }

  log_sink(const log_sink&) = delete;
  log_sink& operator=(const log_sink&) = delete;

  /// Queues `line` (a newline is added); never blocks on the output.
  void write(std::string line) {
    {
      std::lock_guard lock(mutex_);
      if (lines_.size() >= capacity_) {
        ++dropped_;
        return;
      }
      line.push_back('\n');
      lines_.push_back(std::move(line));
    }
    ready_.notify_one();
  }

  /// Lines dropped because the queue was full.
  std::uint64_t dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_total_ + dropped_;
  }

  static constexpr std::chrono::seconds linger{1};

 private:
  void drain() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stopping_ || !lines_.empty(); });
      if (lines_.empty() && stopping_) break;
      std::string out;
      if (dropped_ > 0) {
        out = "(log: " + std::to_string(dropped_) + " line(s) dropped: the output was not read fast enough)\n";
        dropped_total_ += dropped_;
        dropped_ = 0;
      }
      while (!lines_.empty() && out.size() < (std::size_t{64} << 10)) {
        out += lines_.front();
        lines_.pop_front();
      }
      lock.unlock();
      put(out);
      lock.lock();
    }
    finished_ = true;
    done_.notify_all();
  }

  void put(const std::string& out) const {
    std::size_t at = 0;
    while (at < out.size()) {
      const ssize_t n = ::write(fd_, out.data() + at, out.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a closed or failing output: nothing to do but drop
      at += static_cast<std::size_t>(n);
    }
  }

  int fd_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable ready_, done_;
  std::deque<std::string> lines_;
  std::uint64_t dropped_ = 0, dropped_total_ = 0;
  bool stopping_ = false, finished_ = false;
  std::thread writer_;
};

}  // namespace diloco_syncer
