// diloco::zeromq::keep_large_blocks: an opt-in, process-wide malloc setting
// that spares large received ZeroMQ messages their page faults (glibc only).
#pragma once

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace diloco::zeromq {

/// Makes freed blocks of up to 32 MiB stay in malloc's heap for reuse instead
/// of going back to the system (`mallopt(M_MMAP_THRESHOLD, 32 MiB)` and
/// `mallopt(M_TRIM_THRESHOLD, 1 GiB)`). Process-wide and never undone; with
/// glibc only (elsewhere it does nothing); only the first call acts. The
/// library never calls it: a program that receives large messages over
/// ZeroMQ calls it once at startup, before it makes its sockets
/// (tools/diloco_syncer and examples/01_fashion_mnist do).
///
/// Why: libzmq allocates every received message with `malloc`; by default a
/// large one is a fresh mapping, or heap memory that was handed back, whose
/// pages fault in again while the message is read (~3-12 µs per 4 KiB page,
/// as slow as 0.35 GB/s). The cost: up to 1 GiB that the process freed stays
/// mapped, and glibc no longer adapts these thresholds itself. Messages over
/// 32 MiB are still fresh mappings (glibc accepts no higher threshold).
/// diloco's own senders split payloads into parts of
/// `socket_options::chunk_bytes` (1 MiB), which malloc recycles anyway;
/// this matters for peers that send large payloads whole.
inline void keep_large_blocks() noexcept {
#if defined(__GLIBC__)
  static const bool applied = [] {
    (void)::mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)::mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)applied;
#endif
}

}  // namespace diloco::zeromq
