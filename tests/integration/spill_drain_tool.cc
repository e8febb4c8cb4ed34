// Test driver for the drain test against real RabbitMQ (spill_drain_test.py): `fill` appends a
// backlog to a spill log in one process; `drain` recovers it in another and runs the Drainer
// against one owner until the backlog is empty, printing its progress as it goes.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "queue/drainer.h"
#include "queue/spill_log.h"

namespace {

using namespace sluice::queue;
using namespace std::chrono_literals;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::unique_ptr<SpillLog> open_log(const std::string& dir) {
  SpillOptions o;
  o.dir = dir;
  o.segment_bytes = 4u << 20;  // several segments for 10,000 messages: deletion is exercised
  o.log = [](LogSeverity, std::string_view event, std::span<const LogField> fields) {
    std::fprintf(stderr, "spill: %.*s", int(event.size()), event.data());
    for (const auto& [k, v] : fields)
      std::fprintf(stderr, " %.*s=%.*s", int(k.size()), k.data(), int(v.size()), v.data());
    std::fprintf(stderr, "\n");
  };
  RecoveryReport report;
  auto log = SpillLog::open(o, &report);
  if (!log) {
    std::fprintf(stderr, "spill_drain_tool: %s\n", log.error().message.c_str());
    std::exit(1);
  }
  return std::move(*log);
}

uint64_t backlog(const SpillLog& log) {
  uint64_t n = 0;
  for (const QueueStats& s : log.queues())
    n += s.messages;
  return n;
}

int fill(const std::string& dir, const std::string& vhost, const std::vector<std::string>& queues,
         int count) {
  std::unique_ptr<SpillLog> log = open_log(dir);
  log->start();
  SpillProducer& p = log->producer(0);
  uint64_t token = 0, durable = 0, refused = 0;
  auto poll = [&] {
    p.poll(
        [&](const Completion& c) {
          if (c.status == AppendStatus::kDurable) {
            ++durable;
          } else {
            ++refused;
          }
        },
        4096);
  };
  for (int i = 0; i < count; ++i) {
    for (const std::string& q : queues) {
      // /amq/queue/ names an existing queue without declaring it; persistent survives a restart.
      const std::string headers =
          "destination:/amq/queue/" + q + "\npersistent:true\ncontent-type:text/plain\n";
      const std::string body = q + "-" + std::to_string(i);
      const auto give_up = std::chrono::steady_clock::now() + 30s;
      while (p.append(++token, vhost, q, headers, body) != AppendResult::kQueued) {
        poll();
        if (std::chrono::steady_clock::now() > give_up) {
          std::fprintf(stderr, "spill_drain_tool: appends refused for 30 s\n");
          return 1;
        }
        std::this_thread::sleep_for(1ms);
      }
    }
  }
  const uint64_t total = uint64_t(count) * queues.size();
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (durable + refused < total && std::chrono::steady_clock::now() < give_up) {
    poll();
    std::this_thread::sleep_for(1ms);
  }
  log->stop();
  std::printf("{\"appended\": %llu, \"refused\": %llu}\n", (unsigned long long)durable,
              (unsigned long long)refused);
  return durable == total ? 0 : 1;
}

int drain(const std::string& dir, const DrainTarget& target, DrainerOptions options,
          int timeout_s) {
  std::unique_ptr<SpillLog> log = open_log(dir);
  log->start();
  options.log = [](LogSeverity, std::string_view event, std::span<const LogField> fields) {
    std::fprintf(stderr, "drain: %.*s", int(event.size()), event.data());
    for (const auto& [k, v] : fields)
      std::fprintf(stderr, " %.*s=%.*s", int(k.size()), k.data(), int(v.size()), v.data());
    std::fprintf(stderr, "\n");
  };
  Drainer drainer(
      *log, [&](std::string_view, std::string_view) { return std::optional(target); }, options);
  drainer.start();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  uint64_t left = backlog(*log);
  while (left > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(100ms);
    left = backlog(*log);
    std::printf("progress delivered=%llu backlog=%llu\n",
                (unsigned long long)drainer.metrics().delivered.load(), (unsigned long long)left);
    std::fflush(stdout);
  }
  drainer.stop();
  log->sync();
  log->stop();
  const DrainerMetrics& m = drainer.metrics();
  std::printf(
      "{\"backlog\": %llu, \"sent\": %llu, \"delivered\": %llu, \"resent\": %llu, "
      "\"connects\": %llu, \"connect_failures\": %llu, \"link_failures\": %llu}\n",
      (unsigned long long)left, (unsigned long long)m.sent.load(),
      (unsigned long long)m.delivered.load(), (unsigned long long)m.resent.load(),
      (unsigned long long)m.connects.load(), (unsigned long long)m.connect_failures.load(),
      (unsigned long long)m.link_failures.load());
  std::fflush(stdout);
  return left == 0 ? 0 : 1;
}

}  // namespace

static int run_main(int argc, char** argv) {
  CLI::App app{"spill log fill and drain driver for the integration tests"};
  app.require_subcommand(1);
  std::string dir, vhost = "/", queues;
  int count = 0;
  CLI::App* f = app.add_subcommand("fill", "append a backlog");
  f->add_option("--dir", dir)->required();
  f->add_option("--vhost", vhost);
  f->add_option("--queues", queues, "comma separated")->required();
  f->add_option("--count", count, "messages per queue")->required()->check(CLI::Range(1, 1000000));

  DrainTarget target;
  DrainerOptions options;
  std::string passcode_file;
  int timeout_s = 120;
  CLI::App* d = app.add_subcommand("drain", "deliver the backlog to one owner");
  d->add_option("--dir", dir)->required();
  d->add_option("--host", target.host)->required();
  d->add_option("--port", target.port)->required();
  d->add_option("--login", options.login);
  d->add_option("--passcode-file", passcode_file);
  d->add_option("--gateway-id", options.gateway_id)->required();
  d->add_option("--window", options.window)->check(CLI::Range(1, 4096));
  d->add_option("--backoff-max-ms", options.backoff_max_ms);
  d->add_option("--rate", options.rate_per_second,
                "messages per second per connection (0: no limit)");
  d->add_option("--timeout-s", timeout_s);
  CLI11_PARSE(app, argc, argv);

  if (f->parsed()) return fill(dir, vhost, split(queues), count);
  if (!passcode_file.empty()) {
    std::ifstream in(passcode_file);
    std::getline(in, options.passcode);
  }
  return drain(dir, target, options, timeout_s);
}

// An exception that escapes (a failed allocation, a library's error) ends the run with a line
// naming it rather than std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spill_drain_tool: %s\n", e.what());
    return 1;
  }
}
