// Login cache entries: a keyed BLAKE2b per (vhost, login, passcode), its expiry and the
// accepting node's server header.
#include "gateway/login_cache.h"

#include <cstring>

namespace sluice::gateway {
namespace {

// Each part with its length, so that ("ab", "c") and ("a", "bc") never share a digest; an
// absent header differs from an empty one.
void absorb(crypto_generichash_state* st, std::optional<std::string_view> part) {
  const uint64_t len = part ? part->size() + 1 : 0;
  crypto_generichash_update(st, reinterpret_cast<const unsigned char*>(&len), sizeof len);
  if (part && !part->empty()) {
    crypto_generichash_update(st, reinterpret_cast<const unsigned char*>(part->data()),
                              part->size());
  }
}

}  // namespace

LoginCache::LoginCache(uint32_t ttl_ms)
    : ttl_ns_(session::Nanos(ttl_ms) * session::kNanosPerMilli),
      entries_(std::make_unique<Entry[]>(kEntries)) {
  // The key lives in this process only: a digest is worthless to whoever reads memory later.
  crypto_generichash_keygen(key_.data());
}

LoginCache::Digest LoginCache::digest_of(std::string_view vhost,
                                         std::optional<std::string_view> login,
                                         std::optional<std::string_view> passcode) const {
  crypto_generichash_state st;
  crypto_generichash_init(&st, key_.data(), key_.size(), crypto_generichash_BYTES);
  absorb(&st, vhost);
  absorb(&st, login);
  absorb(&st, passcode);
  Digest d;
  crypto_generichash_final(&st, d.data(), d.size());
  return d;
}

LoginCache::Entry& LoginCache::slot_of(const Digest& d) {
  uint64_t index;
  std::memcpy(&index, d.data(), sizeof index);
  return entries_[index % kEntries];
}

std::optional<std::string_view> LoginCache::find(std::string_view vhost,
                                                 std::optional<std::string_view> login,
                                                 std::optional<std::string_view> passcode,
                                                 session::Nanos now) {
  if (ttl_ns_ == 0) return std::nullopt;
  const Digest d = digest_of(vhost, login, passcode);
  Entry& e = slot_of(d);
  if (e.expires == 0 || now >= e.expires || sodium_memcmp(e.digest.data(), d.data(), d.size())) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  return std::string_view(e.server.data(), e.server_len);
}

void LoginCache::remember(std::string_view vhost, std::optional<std::string_view> login,
                          std::optional<std::string_view> passcode, std::string_view server,
                          session::Nanos now) {
  if (ttl_ns_ == 0 || server.empty() || server.size() > kServerBytesMax) return;
  const Digest d = digest_of(vhost, login, passcode);
  Entry& e = slot_of(d);
  e.digest = d;
  e.expires = now + ttl_ns_;
  e.server_len = uint8_t(server.size());
  std::memcpy(e.server.data(), server.data(), server.size());
}

void LoginCache::forget(std::string_view vhost, std::optional<std::string_view> login,
                        std::optional<std::string_view> passcode) {
  const Digest d = digest_of(vhost, login, passcode);
  Entry& e = slot_of(d);
  if (e.expires != 0 && sodium_memcmp(e.digest.data(), d.data(), d.size()) == 0) e = Entry{};
}

}  // namespace sluice::gateway
