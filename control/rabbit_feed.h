// The RabbitMQ feed: which broker node owns each queue, learned from the management API's
// GET /api/queues (the leader of quorum queues and streams, the home node of classic queues).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/result.h"

namespace sluice::control {

struct LearnedQueue {
  std::string vhost;
  std::string queue;
  std::string broker_node;  // RabbitMQ node name, e.g. "rabbit@mq1"
};

// Parses the JSON array answered by GET /api/queues. Each object: "name", "vhost", and the
// owner: "leader" when present and a non-empty string (quorum queues, streams), else "node"
// (classic queues). Objects without a usable owner, name or vhost are skipped and counted. An
// error (one clear line) when the document is not a JSON array of objects.
struct RabbitQueues {
  std::vector<LearnedQueue> queues;
  size_t skipped = 0;
};
Result<RabbitQueues> parse_rabbit_queues(std::string_view json);

struct RabbitFeedSettings {
  // Base URLs "http://host:port" or "http://host:port/prefix", tried in order.
  std::vector<std::string> urls;
  std::string login;
  std::string passcode;        // never logged or put into errors
  uint32_t timeout_ms = 2000;  // per URL attempt: resolve, connect, request and whole response
  size_t body_bytes_max = 256u << 20;
};

struct FeedPoll {
  bool ok = false;
  std::vector<LearnedQueue> queues;  // when ok
  size_t skipped = 0;
  std::string url;  // the URL that answered (or the last one tried)
  uint32_t latency_us = 0;
  // When !ok: each URL's failure, "; "-joined, e.g. "http://127.0.0.1:15672: HTTP 401
  // Unauthorized; http://127.0.0.1:15673: connect: Connection refused".
  std::string error;
};

// Validates a base URL: http only, a host, an optional port (default 80), an optional path
// prefix; no credentials, query or fragment. The error says what is wrong.
Result<> check_feed_url(std::string_view url);

// One poll: GET <base>/api/queues?columns=name,vhost,node,leader,type with HTTP basic auth,
// trying the URLs in order until one answers 200 with a parseable body. `done` runs exactly once,
// on io's thread, never from inside poll_rabbit_feed. If io is stopped or destroyed first, `done`
// is destroyed without being called.
void poll_rabbit_feed(boost::asio::io_context& io, const RabbitFeedSettings& settings,
                      std::function<void(FeedPoll)> done);

}  // namespace sluice::control
