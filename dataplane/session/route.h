// What an engine asks of control for a session, the same for both engines: where the session
// goes (Route, DESIGN section 3, RESOLVE), what it reports back (placements, failed connects,
// how it ended), and the logins nodes accepted (LoginCache). The engines call these on their
// own thread only; the gateway implements them over a replica of control's decisions
// (control/router.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dataplane/session/config.h"
#include "dataplane/session/heart_beat.h"
#include "dataplane/session/queue_key.h"

namespace sluice::session {

inline constexpr uint32_t kNoRouteNode = UINT32_MAX;

// Where a session goes: a node's STOMP listener, the spill listener, or an ERROR to the client.
struct Route {
  enum class Kind : uint8_t {
    kOwner,   // splice to the node at ip:port
    kSpill,   // terminate here: the owner is down, or the queue has a backlog (drain barrier)
    kRefuse,  // ERROR `message` and close (no node configured, name too long for the table)
  };
  Kind kind = Kind::kSpill;
  uint32_t node = kNoRouteNode;
  uint32_t ip = 0;  // IPv4, host order
  uint16_t port = 0;
  std::string_view message;  // kRefuse
  // kOwner for a queue the table does not hold yet: `node` is where placement puts it, recorded
  // only by confirm_placement() once that node accepted the session's login.
  bool placement_pending = false;
};

// Why and where a session ended, for the log. The views live only for the call.
struct SessionEnd {
  std::string_view reason;  // key=value-safe: prelude_end_name() or the engine's own words
  uint32_t client_ip = 0;   // IPv4, host order
  uint16_t client_port = 0;
  std::string_view vhost;
  std::string_view login;
  std::string_view queue;
  uint32_t node = kNoRouteNode;  // the owner or login node, kNoRouteNode: none
  std::string_view message;      // the broker's ERROR message, or the gateway's
};

// An engine thread's view of control's decisions.
class Router {
 public:
  virtual ~Router() = default;
  // Applies what control sent since the last call (bounded work per call).
  virtual void poll() = 0;
  // `session_hash` spreads default-route sessions over the healthy nodes.
  virtual Route route(const QueueKey& key, uint64_t session_hash) = 0;
  // A node to check a CONNECT's login (login_check eager): of the healthy nodes taking new
  // sessions, in an order spread by `session_hash`, the `attempt`-th (a node that failed to
  // answer is followed by the next); kSpill when there is none (the gateway answers itself).
  virtual Route login_node(std::string_view vhost, uint64_t session_hash, uint32_t attempt) = 0;
  // `node` accepted the login of a session routed with placement_pending: record the placement.
  virtual void confirm_placement(const QueueKey& key, uint32_t node) = 0;
  // True when the key's owner is up again: spill sessions for it are ended gracefully.
  virtual bool owner_up(const QueueKey& key) = 0;
  // A connect to `node` was refused or not answered (passive health).
  virtual void connect_failed(uint32_t node) = 0;
  virtual std::string_view node_name(uint32_t node) const = 0;
  // A session ended: logged, rate-limited, by the Router.
  virtual void session_end(const SessionEnd& end) = 0;
  // The owner's CONNECTED answered heart-beats other than the client was told (`check`:
  // allowed, or refused for kOwnerStricter). Logged by the Router.
  virtual void heart_beat_mismatch(uint32_t node, HeartBeat client, HeartBeat told, HeartBeat owner,
                                   HeartBeatCheck check) = 0;
};

// Logins a node accepted (login_check eager), so that a returning client's CONNECT is answered
// without a connection to a node.
class LoginCache {
 public:
  virtual ~LoginCache() = default;
  // The `server` header of the node that accepted this (vhost, login, passcode) within the
  // cache's lifetime, valid until the next call; nullopt when not cached.
  virtual std::optional<std::string_view> find(std::string_view vhost,
                                               std::optional<std::string_view> login,
                                               std::optional<std::string_view> passcode,
                                               Nanos now) = 0;
  virtual void remember(std::string_view vhost, std::optional<std::string_view> login,
                        std::optional<std::string_view> passcode, std::string_view server,
                        Nanos now) = 0;
  // A node refused this login: its entry goes.
  virtual void forget(std::string_view vhost, std::optional<std::string_view> login,
                      std::optional<std::string_view> passcode) = 0;
};

}  // namespace sluice::session
