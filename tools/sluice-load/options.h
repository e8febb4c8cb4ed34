// sluice-load's command line: what a load run and the benchmark sink take, their limits, and
// the parsing and validation that turns argv into them with errors that name the option.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace sluice::load {

enum class Spread : uint8_t {
  kFixed,       // producer i sends to queue i mod queues
  kRoundRobin,  // each producer cycles over every queue, message by message
  kRandom,      // each message goes to a queue drawn at random (seeded)
};
enum class AckMode : uint8_t { kAuto, kClient, kClientIndividual };

// Message body sizes: fixed, uniform in [min, max], or exponential with a mean, clamped to
// [min, max]. Parsed from "256", "4K", "uniform:64-1K", "exp:512".
struct SizeSpec {
  enum class Kind : uint8_t { kFixed, kUniform, kExponential };
  Kind kind = Kind::kFixed;
  uint32_t min = 256;
  uint32_t max = 256;
  uint32_t mean = 256;
};

struct Limits {
  static constexpr uint32_t kConnectionsMax = 10000;   // producer plus consumer connections
  static constexpr uint32_t kPerConnectionMax = 1000;  // producers or consumers on one
  static constexpr uint32_t kQueuesMax = 10000;
  static constexpr uint64_t kStreamsMax = 1u << 20;  // queues x producers (checker memory)
  static constexpr uint32_t kWindowMax = 4096;       // SENDs awaiting RECEIPT per producer
  static constexpr uint32_t kBodyBytesMax = 1u << 20;
  static constexpr double kRateMax = 10e6;         // per producer, messages/s
  static constexpr double kDurationMax_s = 86400;  // a run never lasts longer than a day
  static constexpr double kDurationDefault_s = 10;
  static constexpr double kDrainTimeoutMax_s = 600;
  static constexpr uint32_t kPrefetchMax = 65535;
  static constexpr uint32_t kSessionMessagesMax = 1u << 20;
  static constexpr uint32_t kServeConnectionsMax = 100000;
};

struct LoadOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 61613;
  std::string vhost = "/";
  std::string login;
  std::string passcode;
  uint32_t connections = 1;  // producer connections
  uint32_t producers_per_connection = 1;
  uint32_t consumer_connections = 0;
  uint32_t consumers_per_connection = 1;
  uint32_t queues = 1;
  std::string queue_pattern = "sluice-load-{i}";  // {i}: the queue's index, from 0
  std::string destination_prefix = "/queue/";
  Spread spread = Spread::kFixed;
  SizeSpec size;
  double rate = 0;        // per producer, messages/s; 0: as fast as the window allows
  double duration_s = 0;  // 0 with count 0: kDurationDefault_s
  uint64_t count = 0;     // messages per producer; 0: until the duration ends
  bool receipts = true;
  uint32_t window = 64;
  AckMode ack = AckMode::kAuto;
  uint32_t prefetch = 0;          // 0: the broker's default (no prefetch-count header)
  uint32_t session_messages = 0;  // >0: new-session mode, that many SENDs per session
  double drain_timeout_s = 10;    // after producing: wait for receipts and deliveries
  uint64_t max_errors = 0;
  bool json = false;
  double interval_s = 1;  // progress output period
  uint64_t seed = 1;

  uint32_t producers() const { return connections * producers_per_connection; }
  uint32_t consumers() const { return consumer_connections * consumers_per_connection; }
  std::string queue_name(uint32_t i) const;
};

struct ServeOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 61613;
  uint32_t connections_max = 4096;
  double duration_s = 0;  // 0: until SIGINT/SIGTERM
};

struct CommandLine {
  enum class Action : uint8_t { kLoad, kServe, kHelp, kError };
  Action action = Action::kError;
  LoadOptions load;
  ServeOptions serve;
  std::string message;  // help text, or the error naming the option
};

CommandLine parse_command_line(const std::vector<std::string>& args);  // args without argv[0]

// Exposed for the tests and for reuse: "256", "4K", "1M", "uniform:A-B", "exp:MEAN".
Result<SizeSpec> parse_size(const std::string& text);

}  // namespace sluice::load
