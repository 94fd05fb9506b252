// diloco_wan_delay: holds every packet of one netfilter queue for a fixed
// time, then accepts it — the propagation delay of an emulated WAN link on a
// kernel without netem. bench/wan/wan.py runs one per receiving interface,
// inside the link's network namespace, fed by
//   iptables -t raw -A PREROUTING -i IFACE -j NFQUEUE --queue-num N
// (on ingress: on egress TCP's small-queue limit would throttle the flow).
//
//   diloco_wan_delay --queue N --delay-us MICROSECONDS
//
// Prints "ready" on stdout once bound to the queue; on SIGINT or SIGTERM
// accepts whatever it still holds, prints its counters as one JSON line on
// stderr and exits 0. Every packet gets the same delay, so the packets leave
// in the order they came and one batch verdict (accept every id up to the
// last one due) releases a run of them; packets are not copied to user
// space (metadata only) and GSO packets are not segmented.
// Cost: a few microseconds of CPU per packet; at 5 Gbit/s about half a core
// (/work/shared/MACHINE.md).
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <string_view>

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void request_stop(int) { stop_requested = 1; }

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

/// A packet the kernel queued: its id and when it may leave.
struct held_packet {
  std::uint32_t id;
  std::int64_t due_ns;
};

struct delay_state {
  std::deque<held_packet> held;
  std::int64_t delay_ns = 0;
  std::uint64_t packets = 0;
  std::uint64_t max_held = 0;
};

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* data, void* opaque) {
  auto& state = *static_cast<delay_state*>(opaque);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(data);
  if (header == nullptr) return 0;
  state.held.push_back({ntohl(header->packet_id), now_ns() + state.delay_ns});
  ++state.packets;
  if (state.held.size() > state.max_held) state.max_held = state.held.size();
  return 0;
}

bool parse(std::string_view text, std::uint64_t& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size();
}

int usage() {
  std::fprintf(stderr, "usage: diloco_wan_delay --queue N --delay-us MICROSECONDS [--max-held PACKETS]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t queue = 0, delay_us = 0, max_held = 65536;
  bool have_queue = false, have_delay = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string_view value = argv[++i];
    if (flag == "--queue" && parse(value, queue) && queue <= 65535)
      have_queue = true;
    else if (flag == "--delay-us" && parse(value, delay_us) && delay_us <= 10'000'000)
      have_delay = true;
    else if (flag == "--max-held" && parse(value, max_held) && max_held >= 1 && max_held <= (1u << 24))
      continue;
    else
      return usage();
  }
  if (!have_queue || !have_delay) return usage();

  delay_state state;
  state.delay_ns = std::int64_t(delay_us) * 1000;
  nfq_handle* handle = nfq_open();
  if (handle == nullptr) {
    std::perror("diloco_wan_delay: nfq_open");
    return 1;
  }
  nfq_q_handle* q = nfq_create_queue(handle, static_cast<std::uint16_t>(queue), &on_packet, &state);
  if (q == nullptr) {
    std::perror("diloco_wan_delay: nfq_create_queue (is another program bound to this queue?)");
    nfq_close(handle);
    return 1;
  }
  if (nfq_set_mode(q, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(q, static_cast<std::uint32_t>(max_held)) < 0) {
    std::perror("diloco_wan_delay: configuring the queue");
    return 1;
  }
  // Large packets (GSO) are held whole; without the flag the kernel would
  // segment each one first. Older kernels refuse the flag: then they segment.
  nfq_set_queue_flags(q, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 16u << 20);
  const int fd = nfq_fd(handle);

  struct sigaction action {};
  action.sa_handler = request_stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);

  alignas(8) static char buffer[1 << 16];
  std::uint64_t overruns = 0, batches = 0;
  while (!stop_requested) {
    // Sleep until the next packet is due or one arrives (at most 100 ms, to
    // notice a stop request).
    std::int64_t wait_ns = 100'000'000;
    if (!state.held.empty()) wait_ns = std::max<std::int64_t>(0, state.held.front().due_ns - now_ns());
    timespec timeout{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
    pollfd p{fd, POLLIN, 0};
    const int ready = ppoll(&p, 1, &timeout, nullptr);
    if (ready < 0 && errno != EINTR) {
      std::perror("diloco_wan_delay: ppoll");
      break;
    }
    if (ready > 0) {
      for (int k = 0; k < 256; ++k) {  // drain what is there, bounded
        const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (n < 0) {
          // ENOBUFS: the kernel dropped notifications; their packets are
          // still queued and leave with the next batch verdict.
          if (errno == ENOBUFS) {
            ++overruns;
            continue;
          }
          break;
        }
        nfq_handle_packet(handle, buffer, static_cast<int>(n));
      }
    }
    const std::int64_t now = now_ns();
    std::uint32_t last_due = 0;
    bool any_due = false;
    while (!state.held.empty() && state.held.front().due_ns <= now) {
      last_due = state.held.front().id;
      any_due = true;
      state.held.pop_front();
    }
    if (any_due) {
      nfq_set_verdict_batch(q, last_due, NF_ACCEPT);
      ++batches;
    }
  }
  if (!state.held.empty()) nfq_set_verdict_batch(q, state.held.back().id, NF_ACCEPT);
  nfq_destroy_queue(q);
  nfq_close(handle);
  std::fprintf(stderr,
               "{\"queue\":%llu,\"delay_us\":%llu,\"packets\":%llu,\"batches\":%llu,\"max_held\":%llu,"
               "\"overruns\":%llu}\n",
               static_cast<unsigned long long>(queue), static_cast<unsigned long long>(delay_us),
               static_cast<unsigned long long>(state.packets), static_cast<unsigned long long>(batches),
               static_cast<unsigned long long>(state.max_held), static_cast<unsigned long long>(overruns));
  return 0;
}
