// The engines' login cache (stomp.login_cache_ms): logins a node accepted, kept as a keyed
// BLAKE2b of (vhost, login, passcode) so that no passcode is held, each for a bounded time; one
// per io_uring worker and one per DPDK lcore, so nothing is shared between threads.
#pragma once

#include <sodium.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "dataplane/session/route.h"

namespace sluice::gateway {

class LoginCache final : public session::LoginCache {
 public:
  static constexpr size_t kEntries = 4096;  // per worker, direct-mapped
  static constexpr size_t kServerBytesMax = 128;

  // `ttl_ms` 0: nothing is cached.
  explicit LoginCache(uint32_t ttl_ms);
  std::optional<std::string_view> find(std::string_view vhost,
                                       std::optional<std::string_view> login,
                                       std::optional<std::string_view> passcode,
                                       session::Nanos now) override;
  void remember(std::string_view vhost, std::optional<std::string_view> login,
                std::optional<std::string_view> passcode, std::string_view server,
                session::Nanos now) override;
  void forget(std::string_view vhost, std::optional<std::string_view> login,
              std::optional<std::string_view> passcode) override;

  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  using Digest = std::array<unsigned char, crypto_generichash_BYTES>;
  struct Entry {
    Digest digest{};
    session::Nanos expires = 0;  // 0: empty
    uint8_t server_len = 0;
    std::array<char, kServerBytesMax> server{};
  };
  Digest digest_of(std::string_view vhost, std::optional<std::string_view> login,
                   std::optional<std::string_view> passcode) const;
  Entry& slot_of(const Digest& d);

  session::Nanos ttl_ns_;
  std::array<unsigned char, crypto_generichash_KEYBYTES> key_{};
  std::unique_ptr<Entry[]> entries_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace sluice::gateway
