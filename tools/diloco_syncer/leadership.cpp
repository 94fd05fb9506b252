// diloco_syncer --etcd (leadership.hpp), over diloco::etcd.
#include "leadership.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include <diloco/clock.hpp>
#include <diloco/coordination/leader_lease.hpp>
#include <nlohmann/json.hpp>

namespace diloco_syncer {

namespace {

std::string value_of(const leader& self) {
  nlohmann::json v = {{"endpoint", self.endpoint}};
  if (!self.replication.empty()) v["replication"] = self.replication;
  return v.dump();
}

/// The leader a key's value names; a value that is not ours names its
/// endpoint as the whole value (nothing is replicated from it).
leader leader_of(const diloco::etcd::key_value& kv) {
  leader out;
  out.epoch = static_cast<std::uint64_t>(kv.create_revision);
  const auto v = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
  if (v.is_object() && v.contains("endpoint") && v["endpoint"].is_string()) {
    out.endpoint = v["endpoint"].get<std::string>();
    if (v.contains("replication") && v["replication"].is_string())
      out.replication = v["replication"].get<std::string>();
  } else {
    out.endpoint = kv.value;
  }
  return out;
}

}  // namespace

struct leadership::impl {
  diloco::etcd::client client;
  diloco::etcd::leader_lease lease;
  std::string key;
  std::uint32_t ttl;
  std::function<void(const std::string&)> log;

  impl(const std::string& etcd, std::string k, const leader& self, std::uint32_t ttl_seconds,
       std::function<void(const std::string&)> sink)
      : client(etcd, std::min<std::chrono::milliseconds>(std::chrono::seconds(2),
                                                         std::chrono::milliseconds(250) * ttl_seconds)),
        lease(client, k, value_of(self), {.ttl = std::chrono::seconds(ttl_seconds)}),
        key(std::move(k)),
        ttl(ttl_seconds),
        log(std::move(sink)) {}
};

leadership::leadership(const std::string& etcd, std::string key, const leader& self, std::uint32_t ttl_seconds,
                       std::function<void(const std::string&)> log)
    : impl_(std::make_unique<impl>(etcd, std::move(key), self, ttl_seconds, std::move(log))) {}

leadership::~leadership() = default;

bool leadership::acquire(std::stop_token stop, const standby_wait& wait) {
  auto& i = *impl_;
  std::int64_t seen = -1;
  std::optional<leader> who;
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
        who = leader_of(*holder);
        i.log("standby: " + i.key + " is led by " + who->endpoint + " (epoch " + std::to_string(seen) +
              "); waiting for its lease to end");
      } else if (!holder) {
        who.reset();
      }
      last_error.clear();
    } catch (const diloco::etcd::error& e) {
      if (last_error != e.what()) i.log("standby: " + std::string(e.what()) + "; trying again");
      last_error = e.what();
    }
    wait(who ? &*who : nullptr, std::chrono::milliseconds(250) * i.ttl);
  }
  return false;
}

void leadership::resign() noexcept { impl_->lease.resign(); }

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
