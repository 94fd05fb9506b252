// Output cut into lines, for a launcher that prefixes every line of its
// children's output with the child's name. Tool code, not the library.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace diloco_tools::launch {

/// Collects the bytes of one stream and hands out whole lines, without their
/// '\n'. A line longer than `max_line` bytes is handed out in pieces of that
/// size, so memory stays bounded whatever the child writes; `finish` hands
/// out the last, unterminated line.
class line_splitter {
 public:
  explicit line_splitter(std::size_t max_line = 64 * 1024) : max_line_(max_line) {}

  /// Appends `bytes`; calls `emit(std::string_view line)` for each line it completes.
  template <class Emit>
  void feed(std::string_view bytes, Emit&& emit) {
    for (;;) {
      const auto newline = bytes.find('\n');
      const auto take = newline == std::string_view::npos ? bytes.size() : newline;
      if (pending_.size() + take > max_line_) {
        const auto room = max_line_ - pending_.size();
        pending_.append(bytes.substr(0, room));
        emit(std::string_view(pending_));
        pending_.clear();
        bytes.remove_prefix(room);
        continue;
      }
      if (newline == std::string_view::npos) {
        pending_.append(bytes);
        return;
      }
      pending_.append(bytes.substr(0, newline));
      emit(std::string_view(pending_));
      pending_.clear();
      bytes.remove_prefix(newline + 1);
    }
  }

  /// Hands out what is left, if anything: a last line without '\n'.
  template <class Emit>
  void finish(Emit&& emit) {
    if (!pending_.empty()) emit(std::string_view(pending_));
    pending_.clear();
  }

 private:
  std::size_t max_line_;
  std::string pending_;
};

}  // namespace diloco_tools::launch
