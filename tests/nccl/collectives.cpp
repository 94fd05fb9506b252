// `diloco::nccl::communicator` on real GPUs: one rank per GPU (at most 4),
// each a thread of this process, the NCCL identifier shared over a
// `diloco::threads` unit as a user would share it over MPI.
//
//   ops        every collective in float, double and bf16 against values
//              computed here by formula; a size that does not fit is refused
//   deadline   (2 GPUs or more) rank 1 stays away from a collective: rank 0
//              gets errc::timed_out by its deadline, and rank_lost after
//
// Exit status 0 when every check held, 1 when one failed or the GPU is
// unusable, 77 (skipped) without a GPU (tests/support/gpu.hpp).
#include <diloco/collective/nccl.hpp>
#include <diloco/collective/threads.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "../support/gpu.hpp"

namespace {

using namespace std::chrono_literals;
using diloco::errc;
using diloco::reduce_op;

std::atomic<int> failures{0};

void check(bool ok, const std::string& what, std::size_t rank) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %zu: FAILED: %s\n", rank, what.c_str());
}

diloco::time_point far() { return diloco::clock::now() + 60s; }

/// A device copy of `n` elements of T, freed at the end of the scope.
template <class T>
struct device_array {
  explicit device_array(std::size_t n) : size(n) {
    if (cudaMalloc(&data, n * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { cudaFree(data); }
  void put(const std::vector<T>& host) { cudaMemcpy(data, host.data(), size * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> get() const {
    std::vector<T> host(size);
    cudaMemcpy(host.data(), data, size * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  std::span<T> span() { return {data, size}; }
  std::span<const T> cspan() const { return {data, size}; }
  T* data = nullptr;
  std::size_t size;
};

/// Host value of element type T (bf16 through float).
template <class T>
T of(double x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(static_cast<float>(x));
  else
    return static_cast<T>(x);
}
template <class T>
double value(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return static_cast<double>(__bfloat162float(x));
  else
    return static_cast<double>(x);
}

/// How far a mean may be from the exact one: NCCL's ncclAvg multiplies each
/// rank's value by 1/R before summing, so with 3 ranks it rounds.
template <class T>
double mean_tolerance() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return 1.0 / 64;  // 8 significant bits, values below 4
  else
    return 8 * double(std::numeric_limits<T>::epsilon());
}

/// Every collective in T. Rank k holds k + (i mod 8) / 4 in element i: small
/// integers and quarters, exact in bf16 too, so sums by formula are exact for
/// up to 4 ranks.
template <class T>
void ops(diloco::nccl::communicator& c, const char* type) {
  const std::size_t r = c.rank(), ranks = c.size();
  const std::string t = std::string(" (") + type + ")";
  const double sum_of_ranks = double(ranks * (ranks - 1) / 2);
  auto mine = [&](std::size_t k, std::size_t i) { return double(k) + double(i % 8) / 4.0; };
  constexpr std::size_t n = 4096;
  std::vector<T> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = of<T>(mine(r, i));
  device_array<T> in(n), out(n);
  in.put(host);

  check(!c.all_reduce(in.cspan(), out.span(), reduce_op::sum, far()), "all_reduce sum" + t, r);
  auto got = out.get();
  bool equal = true;
  for (std::size_t i = 0; i < n; ++i)
    equal = equal && value(got[i]) == sum_of_ranks + double(ranks) * double(i % 8) / 4.0;
  check(equal, "all_reduce sum values" + t, r);

  check(!c.all_reduce(in.cspan(), out.span(), reduce_op::mean, far()), "all_reduce mean" + t, r);
  got = out.get();
  equal = true;
  for (std::size_t i = 0; i < n; ++i)
    equal = equal && std::abs(value(got[i]) - (sum_of_ranks + double(ranks) * double(i % 8) / 4.0) / double(ranks)) <=
                         mean_tolerance<T>();
  check(equal, "all_reduce mean values" + t, r);

  // In place.
  check(!c.all_reduce(std::span<const T>(in.cspan()), in.span(), reduce_op::sum, far()), "all_reduce in place" + t, r);
  got = in.get();
  check(value(got[5]) == sum_of_ranks + double(ranks) * 5.0 / 4.0, "all_reduce in place value" + t, r);

  // reduce_scatter: rank r keeps block r of the sums.
  const std::size_t block = 256;
  device_array<T> scatter_in(block * ranks), scatter_out(block);
  std::vector<T> scatter_host(block * ranks);
  for (std::size_t i = 0; i < scatter_host.size(); ++i) scatter_host[i] = of<T>(mine(r, i));
  scatter_in.put(scatter_host);
  check(!c.reduce_scatter(scatter_in.cspan(), scatter_out.span(), reduce_op::sum, far()), "reduce_scatter" + t, r);
  got = scatter_out.get();
  equal = true;
  for (std::size_t i = 0; i < block; ++i)
    equal = equal && value(got[i]) == sum_of_ranks + double(ranks) * double((r * block + i) % 8) / 4.0;
  check(equal, "reduce_scatter values" + t, r);

  // all_gather: block k is rank k's.
  device_array<T> gather_in(block), gather_out(block * ranks);
  std::vector<T> gather_host(block);
  for (std::size_t i = 0; i < block; ++i) gather_host[i] = of<T>(mine(r, i));
  gather_in.put(gather_host);
  check(!c.all_gather(gather_in.cspan(), gather_out.span(), far()), "all_gather" + t, r);
  got = gather_out.get();
  equal = true;
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t i = 0; i < block; ++i) equal = equal && value(got[k * block + i]) == mine(k, i);
  check(equal, "all_gather values" + t, r);

  // broadcast from the last rank.
  device_array<T> b(block);
  b.put(gather_host);
  check(!c.broadcast(b.span(), ranks - 1, far()), "broadcast" + t, r);
  got = b.get();
  equal = true;
  for (std::size_t i = 0; i < block; ++i) equal = equal && value(got[i]) == mine(ranks - 1, i);
  check(equal, "broadcast values" + t, r);

  check(!c.barrier(far()), "barrier" + t, r);
}

void rank_main(diloco::threads::communicator unit, std::size_t ranks) {
  const std::size_t r = unit.rank();
  try {
    const ncclUniqueId id = diloco::nccl::unique_id(unit, far());
    diloco::nccl::communicator c(id, r, ranks, far(), {.device = static_cast<int>(r)});
    check(c.rank() == r && c.size() == ranks, "rank and size", r);
    ops<float>(c, "float");
    ops<double>(c, "double");
    ops<__nv_bfloat16>(c, "bf16");
    // A size that does not fit is refused before anything is queued (on
    // every rank, so that none waits), and ends the unit.
    device_array<float> a(8), b(9);
    check(c.all_reduce(a.cspan(), b.span(), reduce_op::sum, far()) == std::make_error_code(std::errc::invalid_argument),
          "mismatched sizes refused", r);
    check(c.barrier(far()) == make_error_code(errc::rank_lost), "broken after a refusal", r);
  } catch (const std::exception& e) {
    check(false, e.what(), r);
  }
}

/// Rank 1 joins and then stays away from the all-reduce rank 0 starts.
void deadline(std::size_t ranks) {
  auto unit = diloco::threads::make_unit(ranks);
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r, u = std::move(unit[r])]() mutable {
      try {
        const ncclUniqueId id = diloco::nccl::unique_id(u, far());
        diloco::nccl::communicator c(id, r, ranks, far(), {.device = static_cast<int>(r)});
        if (r != 0) {
          // Away until rank 0 has given up (bounded: rank 0's deadline is 2 s).
          for (int i = 0; i < 600 && !done; ++i) std::this_thread::sleep_for(100ms);
          return;
        }
        device_array<float> x(1024);
        const auto started = diloco::clock::now();
        const auto e = c.all_reduce(x.cspan(), x.span(), reduce_op::sum, started + 2s);
        const auto waited = diloco::clock::now() - started;
        done = true;
        check(e == make_error_code(errc::timed_out), "timed out: " + e.message(), r);
        // The deadline plus the abort: NCCL's abort stops its kernels at once.
        check(waited < 10s, "returned by the deadline", r);
        check(c.barrier(far()) == make_error_code(errc::rank_lost), "broken after the timeout", r);
      } catch (const std::exception& e) {
        done = true;
        check(false, e.what(), r);
      }
    });
  for (auto& t : threads) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  const auto gpus = diloco::test::count_gpus();
  if (gpus.devices == 0) return diloco::test::no_gpu_status(gpus);
  const std::string what = argc > 1 ? argv[1] : "ops";
  const std::size_t ranks = static_cast<std::size_t>(std::min(gpus.devices, 4));
  if (what == "ops") {
    auto unit = diloco::threads::make_unit(ranks);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < ranks; ++r) threads.emplace_back(rank_main, std::move(unit[r]), ranks);
    for (auto& t : threads) t.join();
    std::printf("%zu ranks (one per GPU), %d failed checks\n", ranks, failures.load());
  } else if (what == "deadline") {
    if (ranks < 2) {
      // NCCL refuses two ranks on one GPU; a GPU is all DILOCO_REQUIRE_GPU asks for.
      std::printf("skipped: the deadline check needs two GPUs, %zu here\n", ranks);
      return diloco::test::skip_status;
    }
    deadline(ranks);
    std::printf("deadline on %zu ranks, %d failed checks\n", ranks, failures.load());
  } else {
    std::fprintf(stderr, "usage: diloco_nccl_collectives ops|deadline\n");
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
