// The ceiling of CURVE: libsodium's own speed at the cipher libzmq's CURVE
// runs on every message (crypto_box_afternm, XSalsa20-Poly1305 with a
// precomputed key; libzmq 4.3 src/curve_mechanism_base.cpp), on one thread,
// over messages of one part's size. One I/O thread encrypts on the sender and
// one decrypts on the receiver, so CURVE over a connection can go no faster.
#include <sodium.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "bench.hpp"

namespace bench {

double curve_cipher_gbps(std::size_t message_bytes, double seconds) {
  if (::sodium_init() < 0) fail("libsodium: sodium_init failed");
  unsigned char public_key[crypto_box_PUBLICKEYBYTES], secret_key[crypto_box_SECRETKEYBYTES];
  unsigned char shared[crypto_box_BEFORENMBYTES], nonce[crypto_box_NONCEBYTES] = {};
  ::crypto_box_keypair(public_key, secret_key);
  if (::crypto_box_beforenm(shared, public_key, secret_key) != 0) fail("libsodium: crypto_box_beforenm failed");
  std::vector<unsigned char> plain(message_bytes, 0x5a), boxed(message_bytes + crypto_box_MACBYTES);
  std::vector<double> rates;
  for (int pass = 0; pass < 5; ++pass) {
    std::size_t bytes = 0;
    const auto t0 = clock::now();
    do {
      ::sodium_increment(nonce, sizeof nonce);
      (void)::crypto_box_easy_afternm(boxed.data(), plain.data(), plain.size(), nonce, shared);
      bytes += plain.size();
    } while (since(t0) < seconds / 5);
    rates.push_back(static_cast<double>(bytes) / since(t0) / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace bench
