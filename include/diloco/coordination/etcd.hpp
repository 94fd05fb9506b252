// diloco::etcd — a client of etcd's v3 API, enough for leader leases: grant,
// keep alive and revoke a lease, create a key under a lease unless it exists,
// read and delete a key. It speaks to etcd's JSON gateway over HTTP/1.1 (etcd
// 3.4 and later serve it at /v3/; keys and values travel base64-encoded and
// 64-bit integers as decimal strings, as the protocol buffers' JSON mapping
// has them: https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/), so it
// needs no gRPC: HTTP is Boost.Beast's, JSON nlohmann/json's.
//
// Optional component `diloco::etcd` (CMake option DILOCO_WITH_ETCD: Boost's
// headers and nlohmann/json; Debian: libboost-dev nlohmann-json3-dev, and
// etcd-server for the server). Every answer is checked before use: a reply
// that is not what etcd sends is an `etcd::error`, never a crash.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace diloco::etcd {

/// etcd could not be reached, refused a request, or answered something that
/// is not an answer of etcd's; the message says which and why.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A key as etcd holds it. `create_revision` is etcd's revision when the key
/// was created: revisions only grow, so a key deleted and created again
/// comes back with a larger one.
struct key_value {
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;  ///< 0: none
};

namespace detail {

inline constexpr std::string_view base64_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// RFC 4648 base64 with padding.
inline std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, in.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? base64_alphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

/// The bytes of RFC 4648 base64 `in` (padded, as etcd writes it); nullopt if
/// it is not base64.
inline std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  const std::size_t pad = in.ends_with("==") ? 2 : in.ends_with('=') ? 1 : 0;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      v <<= 6;
      if (i + k >= in.size() - pad) continue;  // padding: the group's last one or two
      const auto at = base64_alphabet.find(in[i + k]);
      if (at == std::string_view::npos) return std::nullopt;  // '=' elsewhere included
      v |= static_cast<std::uint32_t>(at);
    }
    const std::size_t bytes = i + 4 == in.size() ? 3 - pad : 3;
    for (std::size_t k = 0; k < bytes; ++k) out += static_cast<char>((v >> (16 - 8 * k)) & 0xff);
  }
  return out;
}

/// A 64-bit integer of an answer: etcd writes them as decimal strings; an
/// absent field is 0 (the JSON mapping leaves zeros out). Throws `error`
/// for anything else.
inline std::int64_t integer(const nlohmann::json& object, const char* field) {
  if (!object.is_object()) throw error("etcd: an answer holds a non-object where an object belongs");
  const auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (!s.empty() && used == s.size()) return v;
  }
  throw error(std::string("etcd: \"") + field + "\" is not an integer in an answer");
}

/// The key-value of one entry of an answer's "kvs".
inline key_value entry(const nlohmann::json& kv) {
  key_value out;
  const auto it = kv.is_object() ? kv.find("value") : kv.end();
  if (it != kv.end()) {
    const auto decoded = it->is_string() ? base64_decode(it->get_ref<const std::string&>()) : std::nullopt;
    if (!decoded) throw error("etcd: a value in an answer is not base64");
    out.value = *decoded;
  }
  out.create_revision = integer(kv, "create_revision");
  out.mod_revision = integer(kv, "mod_revision");
  out.lease = integer(kv, "lease");
  return out;
}

}  // namespace detail

/// An etcd server (or cluster member) at `http://HOST:PORT`. Each request is
/// one HTTP POST on a connection of its own and takes at most the client's
/// timeout, resolving and connecting included. Not thread-safe; cheap to
/// make, one per thread.
class client {
 public:
  /// `url` is `http://HOST:PORT` (a trailing `/` allowed). Throws
  /// `std::invalid_argument` for anything else (https needs TLS, which this
  /// client has not) or a timeout that is not positive.
  explicit client(std::string_view url, std::chrono::milliseconds timeout = std::chrono::seconds(2))
      : url_(url), timeout_(timeout) {
    constexpr std::string_view scheme = "http://";
    if (!url.starts_with(scheme))
      throw std::invalid_argument("diloco::etcd::client: \"" + url_ + "\" is not http://HOST:PORT");
    std::string_view rest = url.substr(scheme.size());
    if (rest.ends_with('/')) rest.remove_suffix(1);
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size() ||
        rest.find_first_not_of("0123456789", colon + 1) != std::string_view::npos || rest.find('/') != rest.npos)
      throw std::invalid_argument("diloco::etcd::client: \"" + url_ + "\" is not http://HOST:PORT");
    host_ = std::string(rest.substr(0, colon)), port_ = std::string(rest.substr(colon + 1));
    if (timeout <= std::chrono::milliseconds::zero())
      throw std::invalid_argument("diloco::etcd::client: the timeout must be positive");
  }

  const std::string& url() const noexcept { return url_; }

  /// A new lease of `ttl` (at least 1 s); returns its id.
  std::int64_t grant(std::chrono::seconds ttl) {
    const auto answer = post("/v3/lease/grant", {{"TTL", ttl.count()}});
    const std::int64_t id = detail::integer(answer, "ID");
    if (id == 0 || detail::integer(answer, "TTL") <= 0)
      throw error("etcd: lease grant refused: " + answer.value("error", answer.dump()));
    return id;
  }

  /// Renews lease `id` for its whole TTL; returns that TTL, or zero when the
  /// lease has expired or was revoked (it is gone for good).
  std::chrono::seconds keep_alive(std::int64_t id) {
    const auto answer = post("/v3/lease/keepalive", {{"ID", std::to_string(id)}});
    const auto result = answer.find("result");
    if (result == answer.end()) throw error("etcd: lease keepalive answered without a result: " + answer.dump());
    return std::chrono::seconds(std::max<std::int64_t>(0, detail::integer(*result, "TTL")));
  }

  /// Revokes lease `id`, deleting the keys it holds; a lease already gone
  /// is no error.
  void revoke(std::int64_t id) { post("/v3/lease/revoke", {{"ID", std::to_string(id)}}, /*not_found_ok=*/true); }

  /// Creates `key` = `value` under lease `lease` (0: none) in one
  /// transaction, if and only if `key` does not exist. Returns whether this
  /// call created it, and the key as it is after the transaction.
  std::pair<bool, key_value> create(std::string_view key, std::string_view value, std::int64_t lease) {
    const std::string k = detail::base64_encode(key);
    nlohmann::json put{{"key", k}, {"value", detail::base64_encode(value)}};
    if (lease != 0) put["lease"] = std::to_string(lease);
    const auto answer = post(
        "/v3/kv/txn", {{"compare", {{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}}},
                       {"success", {{{"request_put", put}}, {{"request_range", {{"key", k}}}}}},
                       {"failure", {{{"request_range", {{"key", k}}}}}}});
    const bool created = answer.value("succeeded", false);
    const auto responses = answer.find("responses");
    if (responses == answer.end() || !responses->is_array() || responses->empty())
      throw error("etcd: a transaction answered without its responses: " + answer.dump());
    const auto range = responses->back().find("response_range");
    if (range == responses->back().end()) throw error("etcd: a transaction's range has no answer");
    const auto kvs = range->find("kvs");
    if (kvs == range->end() || !kvs->is_array() || kvs->size() != 1)
      throw error("etcd: key \"" + std::string(key) + "\" is missing right after its transaction");
    return {created, detail::entry(kvs->front())};
  }

  /// Key `key` as etcd holds it now, or nothing.
  std::optional<key_value> get(std::string_view key) {
    const auto answer = post("/v3/kv/range", {{"key", detail::base64_encode(key)}});
    const auto kvs = answer.find("kvs");
    if (kvs == answer.end()) return std::nullopt;
    if (!kvs->is_array() || kvs->size() != 1) throw error("etcd: a range of one key answered " + answer.dump());
    return detail::entry(kvs->front());
  }

  /// Deletes `key` (nothing if it does not exist).
  void erase(std::string_view key) { post("/v3/kv/deleterange", {{"key", detail::base64_encode(key)}}); }

 private:
  /// POSTs `body` to `path` and returns the answer. Throws `error` when etcd
  /// cannot be reached within the timeout, answers with an HTTP status other
  /// than 200 (etcd's gateway sends its error as JSON: its message is
  /// quoted; with `not_found_ok`, a "not found" is an answer), or sends
  /// something that is not a JSON object.
  nlohmann::json post(std::string_view path, const nlohmann::json& body, bool not_found_ok = false) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    const auto where = [&] { return "etcd at " + url_ + std::string(path); };
    boost::asio::io_context io;
    beast::tcp_stream stream(io);
    http::request<http::string_body> request(http::verb::post, std::string(path), 11);
    request.set(http::field::host, host_ + ":" + port_);
    request.set(http::field::content_type, "application/json");
    request.body() = body.dump();
    request.prepare_payload();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::uint64_t{1} << 24);  // a lease's or a key's answer is far smaller
    // Asynchronous operations, run to completion here: a tcp_stream's
    // timeout bounds only those (connect, write and read together).
    beast::error_code failure;
    boost::asio::ip::tcp::resolver resolver(io);
    boost::system::error_code resolved;
    const auto endpoints = resolver.resolve(host_, port_, resolved);
    if (resolved) throw error(where() + ": cannot resolve " + host_ + ": " + resolved.message());
    stream.expires_after(timeout_);
    stream.async_connect(endpoints, [&](beast::error_code connected, const auto&) {
      if (connected) return void(failure = connected);
      http::async_write(stream, request, [&](beast::error_code written, std::size_t) {
        if (written) return void(failure = written);
        http::async_read(stream, buffer, parser, [&](beast::error_code read, std::size_t) { failure = read; });
      });
    });
    io.run();
    if (failure)
      throw error(where() + ": " +
                  (failure == beast::error::timeout ? "no answer within the timeout" : failure.message()));
    const http::response<http::string_body> response = parser.release();
    beast::error_code ignored;
    stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    auto answer = nlohmann::json::parse(response.body(), nullptr, /*allow_exceptions=*/false);
    if (!answer.is_object()) throw error(where() + ": the answer is not a JSON object");
    if (response.result() != http::status::ok) {
      std::string message = response.body();
      for (const char* field : {"message", "error"})
        if (const auto it = answer.find(field); it != answer.end() && it->is_string()) message = *it;
      if (not_found_ok && message.find("not found") != std::string::npos) return answer;
      throw error(where() + ": HTTP " + std::to_string(response.result_int()) + ": " + message);
    }
    return answer;
  }

  std::string url_, host_, port_;
  std::chrono::milliseconds timeout_;
};

}  // namespace diloco::etcd
