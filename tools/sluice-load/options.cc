// Parsing and validating sluice-load's command line (CLI11), every error naming its option.
#include "tools/sluice-load/options.h"

#include <arpa/inet.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

#include "tools/sluice-load/checker.h"

namespace sluice::load {

namespace {

bool parse_bytes(std::string_view s, uint32_t* out) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return false;
  std::string_view unit(p, size_t(s.data() + s.size() - p));
  if (unit == "K" || unit == "k" || unit == "KiB") {
    v <<= 10;
  } else if (unit == "M" || unit == "m" || unit == "MiB") {
    v <<= 20;
  } else if (!unit.empty() && unit != "B") {
    return false;
  }
  if (v > Limits::kBodyBytesMax) return false;
  *out = uint32_t(v);
  return true;
}

struct Address {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" with a dotted IPv4 host (or localhost) and a port 1-65535; nothing otherwise.
std::optional<Address> parse_address(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string h = text.substr(0, colon);
  if (h == "localhost") h = "127.0.0.1";
  in_addr a{};
  if (inet_pton(AF_INET, h.c_str(), &a) != 1) return std::nullopt;
  uint32_t p = 0;
  std::string_view ps(text.data() + colon + 1, text.size() - colon - 1);
  auto [end, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), p);
  if (ec != std::errc() || end != ps.data() + ps.size() || p == 0 || p > 65535) {
    return std::nullopt;
  }
  return Address{h, uint16_t(p)};
}

Result<> validate(LoadOptions& o, const std::string& target, const std::string& passcode_file,
                  const std::string& size, bool passcode_given) {
  std::optional<Address> address = parse_address(target);
  if (!address)
    return failure("--target: '" + target +
                   "' is not HOST:PORT with an IPv4 host and a port 1-65535");
  o.host = address->host;
  o.port = address->port;
  if (!passcode_file.empty()) {
    if (passcode_given)
      return failure("--passcode-file: give either --passcode or --passcode-file");
    std::ifstream f(passcode_file);
    if (!f) return failure("--passcode-file: cannot read '" + passcode_file + "'");
    std::getline(f, o.passcode);
    while (!o.passcode.empty() && (o.passcode.back() == '\r' || o.passcode.back() == ' '))
      o.passcode.pop_back();
  }
  Result<SizeSpec> parsed_size = parse_size(size);
  if (!parsed_size) return failure("--size: " + parsed_size.error().message);
  o.size = *parsed_size;
  const uint64_t conns = uint64_t(o.connections) + o.consumer_connections;
  if (conns == 0) return failure("--connections: no producer and no consumer connection to run");
  if (conns > Limits::kConnectionsMax)
    return failure("--connections: producer plus consumer connections exceed " +
                   std::to_string(Limits::kConnectionsMax));
  if (o.producers_per_connection == 0 || o.producers_per_connection > Limits::kPerConnectionMax)
    return failure("--producers-per-connection: must be 1 to " +
                   std::to_string(Limits::kPerConnectionMax));
  if (o.consumers_per_connection == 0 || o.consumers_per_connection > Limits::kPerConnectionMax)
    return failure("--consumers-per-connection: must be 1 to " +
                   std::to_string(Limits::kPerConnectionMax));
  if (o.queues == 0 || o.queues > Limits::kQueuesMax)
    return failure("--queues: must be 1 to " + std::to_string(Limits::kQueuesMax));
  if (uint64_t(o.queues) * o.producers() > Limits::kStreamsMax)
    return failure("--queues: queues x producers exceeds " + std::to_string(Limits::kStreamsMax) +
                   " streams the checker tracks; use fewer queues or producers");
  if (o.consumers() > 0 && o.consumers() < o.queues)
    return failure("--consumer-connections: " + std::to_string(o.consumers()) + " consumers for " +
                   std::to_string(o.queues) + " queues; every queue needs at least one consumer");
  if (o.queue_pattern.find("{i}") == std::string::npos && o.queues > 1)
    return failure("--queue-pattern: '" + o.queue_pattern + "' has no {i} for the queue index");
  if (o.queue_pattern.empty()) return failure("--queue-pattern: empty");
  if (o.window == 0 || o.window > Limits::kWindowMax)
    return failure("--window: must be 1 to " + std::to_string(Limits::kWindowMax));
  if (!(o.rate >= 0 && o.rate <= Limits::kRateMax))
    return failure("--rate: must be 0 (unlimited) to " +
                   std::to_string(uint64_t(Limits::kRateMax)));
  if (!(o.duration_s >= 0 && o.duration_s <= Limits::kDurationMax_s))
    return failure("--duration: must be 0 to " + std::to_string(uint64_t(Limits::kDurationMax_s)) +
                   " s");
  if (o.count > 0 && o.producers() > 0 && o.count > Checker::kTrackedMessagesMax / o.producers())
    return failure("--count: producers x count exceeds the 2^30 messages a run tracks");
  if (o.duration_s == 0 && o.count == 0) o.duration_s = Limits::kDurationDefault_s;
  if (o.duration_s == 0) o.duration_s = Limits::kDurationMax_s;
  if (!(o.drain_timeout_s >= 0 && o.drain_timeout_s <= Limits::kDrainTimeoutMax_s))
    return failure("--drain-timeout: must be 0 to " +
                   std::to_string(uint64_t(Limits::kDrainTimeoutMax_s)));
  if (!(o.interval_s >= 0.1 && o.interval_s <= 60))
    return failure("--interval: must be 0.1 to 60 s");
  if (o.prefetch > Limits::kPrefetchMax)
    return failure("--prefetch: must be 0 to " + std::to_string(Limits::kPrefetchMax));
  if (o.session_messages > Limits::kSessionMessagesMax)
    return failure("--new-session: must be 0 to " + std::to_string(Limits::kSessionMessagesMax));
  if (o.session_messages > 0 && !o.receipts)
    return failure(
        "--new-session: sessions end after their receipts; it cannot run with --no-receipts");
  if (o.vhost.empty()) return failure("--vhost: empty");
  return {};
}

// The load options CLI11 takes as text or as a flag; they are turned into LoadOptions after
// parsing, so that each error names its option.
struct LoadArguments {
  std::string target = "127.0.0.1:61613";
  std::string passcode_file;
  std::string size = "256";
  bool no_receipts = false;
  std::string spread = "fixed";
  std::string ack = "auto";
  CLI::Option* passcode = nullptr;  // counted: --passcode and --passcode-file exclude each other
};

// The load run's options, in the order --help lists them.
void add_load_options(CLI::App& app, LoadOptions& o, LoadArguments& a) {
  app.add_option("--target", a.target, "broker or gateway address HOST:PORT")
      ->capture_default_str();
  app.add_option("--vhost", o.vhost, "virtual host (CONNECT host header)")->capture_default_str();
  app.add_option("--login", o.login, "login");
  a.passcode = app.add_option("--passcode", o.passcode, "passcode (visible in ps: prefer a file)");
  app.add_option("--passcode-file", a.passcode_file, "file whose first line is the passcode");
  app.add_option("-c,--connections", o.connections, "producer connections")->capture_default_str();
  app.add_option("-p,--producers-per-connection", o.producers_per_connection)
      ->capture_default_str();
  app.add_option("--consumer-connections", o.consumer_connections)->capture_default_str();
  app.add_option("--consumers-per-connection", o.consumers_per_connection)->capture_default_str();
  app.add_option("-q,--queues", o.queues, "number of queues")->capture_default_str();
  app.add_option("--queue-pattern", o.queue_pattern, "queue names; {i} is the index")
      ->capture_default_str();
  app.add_option("--destination-prefix", o.destination_prefix,
                 "prefix of the destination header (/queue/, /amq/queue/, ...)")
      ->capture_default_str();
  app.add_option("--spread", a.spread, "producers over queues: fixed, round-robin, random")
      ->capture_default_str();
  app.add_option("-s,--size", a.size, "body size: 256, 4K, uniform:64-1K, exp:512")
      ->capture_default_str();
  app.add_option("-r,--rate", o.rate, "messages/s per producer; 0: unlimited")
      ->capture_default_str();
  app.add_option("-d,--duration", o.duration_s,
                 "seconds of producing (default 10 without --count)");
  app.add_option("-n,--count", o.count, "messages per producer; 0: until --duration ends");
  app.add_flag("--no-receipts", a.no_receipts, "send without receipt headers");
  app.add_option("-w,--window", o.window, "SENDs awaiting RECEIPT per producer")
      ->capture_default_str();
  app.add_option("--ack", a.ack, "consumer ack mode: auto, client, client-individual")
      ->capture_default_str();
  app.add_option("--prefetch", o.prefetch, "prefetch-count header on SUBSCRIBE; 0: none");
  app.add_option("--new-session", o.session_messages,
                 "new-session mode: each session connects, sends N messages per producer with "
                 "receipts, disconnects");
  app.add_option("--drain-timeout", o.drain_timeout_s,
                 "seconds to wait for receipts and deliveries after producing")
      ->capture_default_str();
  app.add_option("--max-errors", o.max_errors, "errors tolerated before exiting non-zero")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print the summary as JSON");
  app.add_option("--interval", o.interval_s, "seconds between progress reports")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed for sizes and random spread")->capture_default_str();
}

CLI::App* add_serve_command(CLI::App& app, ServeOptions& s, std::string& listen) {
  CLI::App* serve =
      app.add_subcommand("serve", "a minimal STOMP sink for benchmarks, not a broker");
  serve->add_option("--listen", listen, "address HOST:PORT")->capture_default_str();
  serve->add_option("--connections-max", s.connections_max)->capture_default_str();
  serve->add_option("--duration", s.duration_s, "seconds to run; 0: until a signal");
  return serve;
}

// The serve command's options; the error names the option.
Result<> check_serve(ServeOptions& s, const std::string& listen) {
  std::optional<Address> address = parse_address(listen);
  if (!address) return failure("--listen: '" + listen + "' is not HOST:PORT with an IPv4 host");
  s.host = address->host;
  s.port = address->port;
  if (s.connections_max == 0 || s.connections_max > Limits::kServeConnectionsMax) {
    return failure("--connections-max: must be 1 to " +
                   std::to_string(Limits::kServeConnectionsMax));
  }
  if (!(s.duration_s >= 0 && s.duration_s <= Limits::kDurationMax_s)) {
    return failure("--duration: must be 0 to 86400 s");
  }
  return {};
}

// --spread and --ack by name; the error names the option.
Result<> read_modes(LoadOptions& o, const LoadArguments& a) {
  if (a.spread == "fixed") {
    o.spread = Spread::kFixed;
  } else if (a.spread == "round-robin") {
    o.spread = Spread::kRoundRobin;
  } else if (a.spread == "random") {
    o.spread = Spread::kRandom;
  } else {
    return failure("--spread: '" + a.spread + "' is not fixed, round-robin or random");
  }
  if (a.ack == "auto") {
    o.ack = AckMode::kAuto;
  } else if (a.ack == "client") {
    o.ack = AckMode::kClient;
  } else if (a.ack == "client-individual") {
    o.ack = AckMode::kClientIndividual;
  } else {
    return failure("--ack: '" + a.ack + "' is not auto, client or client-individual");
  }
  return {};
}

}  // namespace

std::string LoadOptions::queue_name(uint32_t i) const {
  std::string name = queue_pattern;
  const size_t at = name.find("{i}");
  if (at != std::string::npos) name.replace(at, 3, std::to_string(i));
  return name;
}

Result<SizeSpec> parse_size(const std::string& text) {
  SizeSpec s;
  std::string_view t(text);
  if (t.starts_with("uniform:")) {
    t.remove_prefix(8);
    const size_t dash = t.find('-');
    if (dash == t.npos || !parse_bytes(t.substr(0, dash), &s.min) ||
        !parse_bytes(t.substr(dash + 1), &s.max) || s.min > s.max) {
      return failure("'" + text + "' is not uniform:MIN-MAX with MIN <= MAX <= 1M");
    }
    s.kind = SizeSpec::Kind::kUniform;
    s.mean = s.min + (s.max - s.min) / 2;
  } else if (t.starts_with("exp:")) {
    t.remove_prefix(4);
    if (!parse_bytes(t, &s.mean) || s.mean == 0) {
      return failure("'" + text + "' is not exp:MEAN with 0 < MEAN <= 1M");
    }
    s.kind = SizeSpec::Kind::kExponential;
    s.min = 0;
    s.max = Limits::kBodyBytesMax;
  } else {
    if (!parse_bytes(t, &s.min)) {
      return failure("'" + text + "' is not a size in bytes (256, 4K, 1M; at most 1M)");
    }
    s.max = s.mean = s.min;
  }
  return s;
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine cl;
  LoadOptions& o = cl.load;
  CLI::App app{
      "sluice-load: STOMP producers and consumers that check order, loss and duplicates, and "
      "report throughput and latency.\n`sluice-load serve`: a STOMP sink for benchmarks."};
  app.set_help_all_flag("--help-all");
  LoadArguments load_args;
  add_load_options(app, o, load_args);
  std::string listen = "127.0.0.1:61613";
  CLI::App* serve = add_serve_command(app, cl.serve, listen);

  std::vector<std::string> argv_strings{"sluice-load"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  argv.reserve(argv_strings.size());
  for (const std::string& s : argv_strings)
    argv.push_back(s.c_str());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    cl.action = CommandLine::Action::kHelp;
    cl.message = app.help();
    return cl;
  } catch (const CLI::CallForAllHelp&) {
    cl.action = CommandLine::Action::kHelp;
    cl.message = app.help("", CLI::AppFormatMode::All);
    return cl;
  } catch (const CLI::ParseError& e) {
    cl.message = e.what();
    return cl;
  }
  if (serve->parsed()) {
    if (Result<> r = check_serve(cl.serve, listen); !r) {
      cl.message = r.error().message;
      return cl;
    }
    cl.action = CommandLine::Action::kServe;
    return cl;
  }
  o.receipts = !load_args.no_receipts;
  if (Result<> r = read_modes(o, load_args); !r) {
    cl.message = r.error().message;
    return cl;
  }
  Result<> valid = validate(o, load_args.target, load_args.passcode_file, load_args.size,
                            load_args.passcode->count() > 0);
  if (valid) {
    cl.action = CommandLine::Action::kLoad;
  } else {
    cl.message = valid.error().message;
  }
  return cl;
}

}  // namespace sluice::load
