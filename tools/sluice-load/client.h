// One sluice-load STOMP connection, sans I/O: CONNECT, SUBSCRIBE for its consumers, SENDs for
// its producers (window, rate, sizes, spread), RECEIPTs matched to SENDs, MESSAGEs checked and
// ACKed, DISCONNECT, and new-session mode. The event loop moves the bytes and reads the clock.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/session/parser.h"
#include "tools/sluice-load/checker.h"
#include "tools/sluice-load/histogram.h"
#include "tools/sluice-load/options.h"

namespace sluice::load {

// Headers every message carries, so that consumers can check it.
inline constexpr std::string_view kRunHeader = "sluice-load-run";
inline constexpr std::string_view kProducerHeader = "sluice-load-producer";
inline constexpr std::string_view kSeqHeader = "sluice-load-seq";
inline constexpr std::string_view kQueueHeader = "sluice-load-queue";
inline constexpr std::string_view kTimeHeader = "sluice-load-ts";  // send time, ns

// What a run shares between its connections: counters and latency histograms.
struct RunStats {
  uint64_t errors = 0;
  uint64_t receipts = 0;
  uint64_t sessions = 0;          // new-session mode: sessions completed (DISCONNECT receipted)
  uint64_t bytes_sent = 0;        // message bodies sent
  uint64_t bytes_received = 0;    // message bodies received
  uint64_t deliveries = 0;        // MESSAGE frames, duplicates and strangers included
  uint64_t foreign = 0;           // MESSAGEs without this run's headers (left over in a queue)
  Histogram receipt_latency_ns;   // SEND written -> its RECEIPT
  Histogram delivery_latency_ns;  // SEND written -> its MESSAGE at a consumer
  std::string first_error;
  void error(std::string_view what);
};

// What every connection of a run shares, read-only.
struct RunPlan {
  const LoadOptions* options = nullptr;
  std::vector<std::string> destinations;  // per queue: prefix + name
  uint64_t run_id = 0;
  uint64_t start_ns = 0;  // producers' rate schedule starts here
};

class Client {
 public:
  // Bytes of control frames (ACK, SUBSCRIBE, DISCONNECT) that the output always has room for.
  static constexpr size_t kControlBytesMax = 1024;
  // Producers stop writing SENDs once this much output is pending: bounds memory and batches
  // writes.
  static constexpr size_t kOutputHighBytes = 64u << 10;
  static constexpr size_t kHeadersBytesMax = 1024;  // a SEND's command and headers

  enum class State : uint8_t { kIdle, kConnecting, kReady, kDisconnecting, kClosed, kFailed };

  // Producers [first_producer, +producers) and consumers [first_consumer, +consumers), global
  // ids; consumer c reads queue c mod queues.
  Client(const RunPlan& plan, Checker* checker, RunStats* stats, uint32_t first_producer,
         uint32_t producers, uint32_t first_consumer, uint32_t consumers);

  // A new session: CONNECT (and SUBSCRIBEs once CONNECTED) queued as output.
  void open();
  // `buf` holds the peer's bytes not yet consumed; returns how many were consumed. Stops early
  // when the output has no room for control frames: call again once output was taken.
  size_t on_bytes(std::string_view buf, uint64_t now_ns);
  // Writes the SENDs that the window, the rate, the count and the output room allow.
  void fill(uint64_t now_ns);
  // The duration is over: producers send nothing more.
  void stop_producing() { stopping_ = true; }
  // DISCONNECT with a receipt; state kDisconnecting until it arrives, then kClosed.
  void disconnect();
  // The transport broke: state kFailed, in-flight SENDs stay unacknowledged.
  void on_transport_closed(std::string_view why);

  State state() const { return state_; }
  bool producing_done() const;  // every producer reached its count or was stopped
  uint32_t in_flight() const { return in_flight_; }
  // Every SUBSCRIBE of this connection was receipted (true without consumers).
  bool subscribed() const { return subscribed_; }
  // New-session mode: this session has sent its quota and got every receipt; disconnect.
  bool session_complete() const;
  // Earliest time a rate-limited producer may send next; 0 when none waits for time.
  uint64_t next_due_ns() const { return next_due_ns_; }

  // Output: bytes to write. The loop swaps the pending buffer out and writes it while the
  // client fills the other; both have the same capacity.
  size_t pending_bytes() const { return out_len_; }
  void take_output(std::unique_ptr<char[]>* buf, size_t* len);
  size_t output_capacity() const { return out_cap_; }

 private:
  struct Producer {
    uint32_t id = 0;
    uint64_t sent = 0;          // whole run
    uint64_t session_sent = 0;  // this session
    uint32_t in_flight = 0;
    uint32_t next_queue = 0;  // round-robin spread
    uint64_t rng = 0;
    bool done = false;
  };
  struct Slot {             // a SEND awaiting its RECEIPT
    uint32_t producer = 0;  // local index
    uint32_t queue = 0;
    uint32_t gen = 0;
    bool used = false;
    uint64_t seq = 0;
    uint64_t sent_ns = 0;
  };

  bool room(size_t bytes) const { return out_cap_ - out_len_ >= bytes; }
  std::span<char> tail() { return {out_.get() + out_len_, out_cap_ - out_len_}; }
  void commit(std::string_view frame) { out_len_ += frame.size(); }
  bool send_one(Producer& p, uint64_t now_ns);
  uint32_t pick_queue(Producer& p);
  uint32_t pick_size(Producer& p);
  void subscribe_all();
  void on_frame(const session::Frame& f, uint64_t now_ns);
  void on_receipt(const session::Frame& f, uint64_t now_ns);
  void on_message(const session::Frame& f, uint64_t now_ns);
  void ack(std::string_view id);
  void fail(std::string_view why);

  const RunPlan& plan_;
  const LoadOptions& o_;
  Checker* checker_;
  RunStats* stats_;
  session::Parser parser_;
  State state_ = State::kIdle;
  std::vector<Producer> producers_;
  uint32_t first_consumer_;
  uint32_t consumers_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  uint32_t in_flight_ = 0;
  uint32_t next_producer_ = 0;  // fairness: the producer that fills first next time
  bool stopping_ = false;
  bool subscribed_ = false;
  uint64_t next_due_ns_ = 0;
  std::unique_ptr<char[]> out_;
  size_t out_cap_ = 0;
  size_t out_len_ = 0;
  std::string pending_ack_;  // client mode: the last MESSAGE's ack id, acked per batch
};

}  // namespace sluice::load
