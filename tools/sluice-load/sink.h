// The benchmark sink's STOMP server side, sans I/O: CONNECTED, RECEIPT, SENDs delivered to the
// subscribers of the same destination (round-robin), ACK/NACK accepted and ignored. A tool to
// measure proxies with, not a broker: nothing is stored, a SEND nobody subscribes to is dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dataplane/session/parser.h"

namespace sluice::load {

class Sink {
 public:
  // Outputs above this many pending bytes make the sink congested: the loop stops feeding it
  // input until they drain, so memory stays bounded whatever the producers do.
  static constexpr size_t kCongestedBytes = 4u << 20;

  struct Stats {
    uint64_t connections = 0;
    uint64_t sends = 0;
    uint64_t delivered = 0;
    uint64_t dropped = 0;  // SENDs to a destination without subscribers
    uint64_t receipts = 0;
    uint64_t errors = 0;
  };

  explicit Sink(uint32_t connections_max);

  // A new connection's id (reuses closed ones), or ~0 when connections_max are open.
  uint32_t open();
  void close(uint32_t id);
  // The peer's bytes not yet consumed; returns how many were consumed. Stops while congested().
  size_t on_bytes(uint32_t id, std::string_view buf);

  bool congested() const { return congested_ > 0; }
  // The connection should be closed once its output is written (DISCONNECT or ERROR).
  bool closing(uint32_t id) const { return conns_[id].closing; }
  size_t pending_bytes(uint32_t id) const { return conns_[id].out.size(); }
  // Swaps the connection's pending output into `buf` (whose old contents are dropped).
  void take_output(uint32_t id, std::string* buf);
  // Ids whose output grew since clear_dirty() (each once); the loop writes them.
  const std::vector<uint32_t>& dirty() const { return dirty_; }
  void clear_dirty();
  const Stats& stats() const { return stats_; }

 private:
  struct Subscription {
    uint32_t conn;
    std::string id;  // raw, as in the SUBSCRIBE
    bool client_ack;
  };
  struct Destination {
    std::vector<Subscription> subs;
    size_t next = 0;
  };
  struct Conn {
    std::unique_ptr<session::Parser> parser;
    std::string out;
    bool open = false;
    bool connected = false;
    bool closing = false;
    bool dirty = false;
    bool congested = false;
  };

  void on_frame(uint32_t id, const session::Frame& f);
  void deliver(const session::Frame& send, std::string_view destination);
  void receipt(uint32_t id, const session::Frame& f);
  void error(uint32_t id, std::string_view message);
  void wrote(uint32_t id);  // after appending to conns_[id].out

  uint32_t connections_max_;
  std::vector<Conn> conns_;
  std::vector<uint32_t> free_;
  std::unordered_map<std::string, Destination> destinations_;
  std::vector<uint32_t> dirty_;
  uint32_t congested_ = 0;
  uint64_t message_id_ = 0;
  Stats stats_;
  std::string scratch_;
};

}  // namespace sluice::load
