// diloco_syncer --etcd (leadership.hpp), over diloco::etcd.
#include "leadership.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include <diloco/clock.hpp>
#include <diloco/coordination/leader_lease.hpp>

namespace diloco_syncer {

struct leadership::impl {
  diloco::etcd::client client;
  diloco::etcd::leader_lease lease;
  std::string key;
  std::uint32_t ttl;
  std::function<void(const std::string&)> log;

  impl(const std::string& etcd, std::string k, std::string name, std::uint32_t ttl_seconds,
       std::function<void(const std::string&)> sink)
      : client(etcd, std::min<std::chrono::milliseconds>(std::chrono::seconds(2),
                                                         std::chrono::milliseconds(250) * ttl_seconds)),
        lease(client, k, std::move(name), {.ttl = std::chrono::seconds(ttl_seconds)}),
        key(std::move(k)),
        ttl(ttl_seconds),
        log(std::move(sink)) {}
};

leadership::leadership(const std::string& etcd, std::string key, std::string name, std::uint32_t ttl_seconds,
                       std::function<void(const std::string&)> log)
    : impl_(std::make_unique<impl>(etcd, std::move(key), std::move(name), ttl_seconds, std::move(log))) {}

leadership::~leadership() = default;

bool leadership::acquire(std::stop_token stop) {
  auto& i = *impl_;
  std::int64_t seen = -1;
  std::string last_error;
  while (!stop.stop_requested()) {
    try {
      if (i.lease.campaign(diloco::clock::now())) {
        i.log("leading " + i.key + " with epoch " + std::to_string(i.lease.epoch()) + " (lease of " +
              std::to_string(i.ttl) + " s in etcd at " + i.client.url() + ")");
        return true;
      }
      const auto& holder = i.lease.holder();
      if (holder && holder->create_revision != seen) {
        seen = holder->create_revision;
        i.log("standby: " + i.key + " is led by " + holder->value + " (epoch " + std::to_string(seen) +
              "); waiting for its lease to end");
      }
      last_error.clear();
    } catch (const diloco::etcd::error& e) {
      if (last_error != e.what()) i.log("standby: " + std::string(e.what()) + "; trying again");
      last_error = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250) * i.ttl);
  }
  return false;
}

std::uint64_t leadership::epoch() const noexcept { return impl_->lease.epoch(); }

void leadership::keep() {
  auto& i = *impl_;
  if (i.lease.renew(diloco::clock::now())) return;
  const std::string why = i.lease.lost() ? i.lease.last_error()
                          : i.lease.last_error().empty()
                              ? "the lease was not renewed in time (was the process paused?)"
                              : "etcd out of reach past the lease's trusted time: " + i.lease.last_error();
  std::fprintf(stderr, "diloco_syncer: stepped down from %s (epoch %llu): %s\n", i.key.c_str(),
               static_cast<unsigned long long>(i.lease.epoch()), why.c_str());
  std::fflush(stderr);
  std::_Exit(stepped_down_status);
}

}  // namespace diloco_syncer
