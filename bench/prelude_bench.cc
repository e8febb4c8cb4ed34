// Complete preludes per second on one core: CONNECT and a first SEND fed to a fresh Prelude,
// driven to kBind and the bind plan, as the engine does for every new connection.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/mean_reporter.h"
#include "dataplane/session/config.h"
#include "dataplane/session/prelude.h"

namespace {

namespace ss = sluice::session;

constexpr double kPreludesPerSecondTarget = 2'000'000;

std::string client_session() {
  std::string s =
      "CONNECT\naccept-version:1.0,1.1,1.2\nhost:/\nlogin:orders-service\npasscode:s3cret-pw\n"
      "heart-beat:10000,10000\n\n";
  s.push_back('\0');
  s += "SEND\ndestination:/queue/orders\ncontent-type:application/json\ncontent-length:100\n"
       "receipt:message-1\n\n";
  s += std::string(100, 'x');
  s.push_back('\0');
  return s;
}

void prelude_to_bind(benchmark::State& state) {
  const ss::SessionConfig config;
  const std::string session = client_session();
  // One buffer for every connection, as an engine reuses a slot's buffer.
  std::vector<char> buffer(config.prelude_bytes_max);
  for (auto _ : state) {
    ss::Prelude p(config, buffer, 0);
    p.feed(session, 0);
    ss::PreludeEvent ev = p.next();
    while (ev.kind == ss::PreludeEvent::Kind::kReply) {
      benchmark::DoNotOptimize(ev.to_client.data());
      ev = p.next();
    }
    if (ev.kind != ss::PreludeEvent::Kind::kBind) {
      state.SkipWithError("the session did not reach kBind");
      return;
    }
    ss::BindPlan plan = p.take_bind_plan();
    benchmark::DoNotOptimize(plan);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(session.size()));
  state.counters["preludes/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("prelude_connect_send_to_bind", prelude_to_bind);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  sluice::bench::MeanReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const double rate = reporter.counter("prelude_connect_send_to_bind", "preludes/s");
  if (rate < 0) {
    std::printf("preludes/s per core = not measured (filtered out or failed)\n");
  } else {
    std::printf("preludes/s per core = %.0f (target >= %.0f)%s\n", rate, kPreludesPerSecondTarget,
                rate >= kPreludesPerSecondTarget ? "" : " BELOW TARGET");
  }
  return 0;
}
