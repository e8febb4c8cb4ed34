// What the admin API shows about the dataplane's sessions (DESIGN section 9:
// `sluicectl sessions`): the gateway implements it over its engine's workers, since control
// does not include an engine. Every call comes on the control thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::control {

struct SessionInfo {
  uint32_t worker = 0;
  uint64_t id = 0;         // unique within the gateway process
  std::string client;      // "10.0.0.7:51234"
  std::string vhost;       // empty while in prelude
  std::string queue;       // empty while in prelude; the destination for the default route
  std::string owner;       // node name; empty in prelude and for spill sessions
  std::string state;       // "prelude", "connecting", "replay", "spliced", "spill", "closing"
  bool parked = false;     // spliced and idle, its descriptors held by the engine's ring
  uint64_t bytes_in = 0;   // client -> gateway/owner
  uint64_t bytes_out = 0;  // owner/gateway -> client
  int64_t age_ms = 0;
};

struct SessionTotals {
  uint64_t active = 0;  // every state
  uint64_t prelude = 0;
  uint64_t spliced = 0;
  uint64_t spill = 0;
  uint64_t accepted = 0;  // since start
  uint64_t refused = 0;   // over a limit at accept
  uint64_t parked = 0;    // spliced sessions parked now (counted in spliced too)
};

// The DPDK engine's ports and lcores (`sluicectl status`); absent with the io_uring engine.
struct DataplaneStatus {
  struct Port {
    std::string device;
    std::string mac;
    uint64_t rx_packets = 0;
    uint64_t tx_packets = 0;
    uint64_t rx_bytes = 0;
    uint64_t tx_bytes = 0;
    uint64_t rx_missed = 0;
    uint64_t rx_errors = 0;
    uint64_t tx_errors = 0;
    uint64_t rx_nombuf = 0;
  };
  struct Lcore {
    uint32_t id = 0;
    uint64_t flows = 0;            // every state
    uint64_t prelude_flows = 0;    // prelude and binding
    uint64_t lingering_flows = 0;  // ended, waiting for stragglers
    uint64_t spliced = 0;          // flows that reached splice mode since start
    uint64_t rx_frames = 0;
    uint64_t tx_frames = 0;
    uint64_t tx_dropped = 0;  // the ports' tx rings were full
  };
  std::string engine;  // "dpdk"
  std::vector<Port> ports;
  std::vector<Lcore> lcores;
};

class SessionsAdmin {
 public:
  virtual ~SessionsAdmin() = default;
  // At most `limit` sessions (oldest first per worker); *total counts every session of the
  // workers that answered; *unanswered lists the workers that did not answer in time.
  virtual std::vector<SessionInfo> sessions(size_t limit, size_t* total,
                                            std::vector<uint32_t>* unanswered) = 0;
  virtual SessionTotals totals() = 0;
  // Prometheus families of the engine (sessions, bytes, refusals by reason), appended to /metrics.
  virtual std::string metrics_text() = 0;
  // The DPDK engine's ports and lcores; nothing with the io_uring engine.
  virtual std::optional<DataplaneStatus> dataplane() { return std::nullopt; }
};

}  // namespace sluice::control
