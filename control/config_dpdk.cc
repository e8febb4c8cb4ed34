// The [dpdk] section of the config: the DPDK engine's EAL arguments, ports, addresses, routes
// and limits, checked against [listen] and [[nodes]] (the engine routes by IPv4 literal only).
#include <algorithm>
#include <sstream>

#include "control/config_reader.h"

namespace sluice::control::config_detail {
namespace {

constexpr size_t kEalArgsMax = 128;
constexpr size_t kPortsMax = 16;
constexpr size_t kLocalIpsMax = 64;
constexpr size_t kRoutesMax = 256;

std::string ip_text(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." +
         std::to_string((ip >> 8) & 0xff) + "." + std::to_string(ip & 0xff);
}

bool routed(const DpdkConfig& d, uint32_t ip) {
  return std::any_of(d.routes.begin(), d.routes.end(), [ip](const DpdkConfig::RouteSpec& r) {
    const uint32_t mask = r.length == 0 ? 0 : ~uint32_t(0) << (32 - r.length);
    return (ip & mask) == (r.prefix & mask);
  });
}

// eal_args, ports and exception_port: what the EAL is given and the devices the engine owns.
void read_devices(const Table& t, DpdkConfig& d) {
  if (auto items = t.strings("eal_args")) {
    if (items->size() > kEalArgsMax) t.fail_at("eal_args", "at most 128 arguments");
    for (const Item& it : *items)
      d.eal_args.push_back(it.value);
  }
  if (auto items = t.strings("ports")) {
    if (items->empty() || items->size() > kPortsMax) {
      t.fail_at("ports",
                "must name 1 to 16 devices, e.g. [\"net_af_packet0\"] or [\"0000:03:00.0\"]");
    }
    for (size_t i = 0; i < items->size(); ++i) {
      const Item& it = (*items)[i];
      if (it.value.empty()) fail(it.line, t.key("ports") + "[" + std::to_string(i) + "]", "empty");
      if (std::find(d.ports.begin(), d.ports.end(), it.value) != d.ports.end()) {
        fail(it.line, t.key("ports") + "[" + std::to_string(i) + "]",
             "duplicate device \"" + it.value + "\"");
      }
      d.ports.push_back(it.value);
    }
  } else {
    t.fail_at("ports", "required: the devices the engine polls, e.g. [\"net_af_packet0\"]");
  }
  if (auto v = t.string("exception_port")) {
    if (std::find(d.ports.begin(), d.ports.end(), *v) != d.ports.end()) {
      t.fail_at("exception_port", "must not be one of ports: it is the host's own TAP device");
    }
    d.exception_port = *v;
  }
}

// local_ips and the local port range: the owner leg's source addresses.
void read_local_addresses(const Table& t, DpdkConfig& d) {
  if (auto items = t.strings("local_ips")) {
    if (items->empty() || items->size() > kLocalIpsMax) t.fail_at("local_ips", "1 to 64 addresses");
    for (size_t i = 0; i < items->size(); ++i) {
      const Item& it = (*items)[i];
      std::optional<uint32_t> ip = ipv4_value(it.value);
      if (!ip || *ip == 0) {
        fail(it.line, t.key("local_ips") + "[" + std::to_string(i) + "]",
             "must be an IPv4 address, e.g. \"10.0.2.1\"");
      }
      d.local_ips.push_back(*ip);
    }
  } else {
    t.fail_at("local_ips", "required: the owner leg's source addresses");
  }
  if (auto v = t.integer("local_port_min", 1024, 65535)) d.local_port_min = uint16_t(*v);
  if (auto v = t.integer("local_port_max", 1024, 65535)) d.local_port_max = uint16_t(*v);
  if (d.local_port_min > d.local_port_max) {
    t.fail_at("local_port_max", "must not be below local_port_min");
  }
}

// One routes entry, "PREFIX/LEN DEVICE" or "PREFIX/LEN DEVICE via GATEWAY", whose device is one
// of the ports or the exception port.
DpdkConfig::RouteSpec read_route(const Item& it, const std::string& key, const DpdkConfig& d) {
  std::istringstream in(it.value);
  std::string prefix, device, via_word, via;
  in >> prefix >> device >> via_word >> via;
  const std::string form = "must be \"PREFIX/LEN DEVICE\" or \"PREFIX/LEN DEVICE via GATEWAY\"";
  const size_t slash = prefix.find('/');
  if (slash == std::string::npos || device.empty()) fail(it.line, key, form);
  DpdkConfig::RouteSpec r;
  std::optional<uint32_t> ip = ipv4_value(prefix.substr(0, slash));
  const std::string len = prefix.substr(slash + 1);
  if (!ip || len.empty() || len.size() > 2 ||
      !std::all_of(len.begin(), len.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
      std::stoi(len) > 32) {
    fail(it.line, key, form + "; the prefix is an IPv4 address and a length 0..32");
  }
  r.prefix = *ip;
  r.length = uint8_t(std::stoi(len));
  if (device != d.exception_port &&
      std::find(d.ports.begin(), d.ports.end(), device) == d.ports.end()) {
    fail(it.line, key, "device \"" + device + "\" is neither in ports nor exception_port");
  }
  r.device = device;
  if (!via_word.empty()) {
    std::optional<uint32_t> gw = ipv4_value(via);
    if (via_word != "via" || !gw) fail(it.line, key, form);
    r.via = *gw;
  }
  return r;
}

void read_routes(const Table& t, DpdkConfig& d) {
  if (auto items = t.strings("routes")) {
    if (items->size() > kRoutesMax) t.fail_at("routes", "at most 256 routes");
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string key = t.key("routes") + "[" + std::to_string(i) + "]";
      d.routes.push_back(read_route((*items)[i], key, d));
    }
  }
}

// spill_listen, which must be routed: the spill listener sits behind the exception port.
void read_spill_listen(const Table& t, DpdkConfig& d) {
  if (auto a = read_address(t, "spill_listen")) {
    std::optional<uint32_t> ip = ipv4_value(a->host);
    if (!ip) t.fail_at("spill_listen", "the host must be an IPv4 address (the TAP side)");
    if (!routed(d, *ip)) {
      t.fail_at("spill_listen", "no route reaches " + a->host + "; add one to routes");
    }
    d.spill_listen = *a;
    d.spill_ip = *ip;
  } else {
    t.fail_at("spill_listen",
              "required: HOST:PORT of the spill listener behind the exception port, e.g. "
              "\"10.0.3.1:61700\"");
  }
}

void read_flow_limits(const Table& t, DpdkConfig& d) {
  if (auto v = t.integer("flows_max", 1, DpdkConfig::kFlowsMax)) d.flows_max = uint32_t(*v);
  if (auto v = t.integer("prelude_flows_max", 1, DpdkConfig::kFlowsMax)) {
    d.prelude_flows_max = uint32_t(*v);
  }
  if (d.prelude_flows_max > d.flows_max) {
    t.fail_at("prelude_flows_max", "must not exceed flows_max");
  }
  if (auto v = t.integer("mbufs", 1023, DpdkConfig::kMbufsMax)) d.mbufs = uint32_t(*v);
}

// The engine answers for listen's address and routes to the nodes by IPv4 literal.
void check_engine_addresses(GatewayConfig* c) {
  DpdkConfig& d = c->dpdk;
  std::optional<uint32_t> vip = ipv4_value(c->listen.host);
  if (!vip || *vip == 0) {
    fail(0, "listen.address",
         "with gateway.engine = \"dpdk\" the host is the virtual IP clients connect to (an IPv4 "
         "address, not 0.0.0.0)");
  }
  d.virtual_ip = *vip;
  for (size_t i = 0; i < c->nodes.size(); ++i) {
    const NodeSpec& n = c->nodes[i];
    std::optional<uint32_t> ip = ipv4_value(n.host);
    const std::string key = "nodes[" + std::to_string(i) + "].address";
    if (!ip) fail(0, key, "with the DPDK engine a node's host must be an IPv4 address");
    if (!routed(d, *ip)) fail(0, key, "no [dpdk] route reaches " + ip_text(*ip));
  }
}

}  // namespace

void read_dpdk(const Table& root, GatewayConfig* c) {
  std::optional<Table> t =
      root.table("dpdk", {"eal_args", "ports", "exception_port", "local_ips", "local_port_min",
                          "local_port_max", "routes", "spill_listen", "flows_max",
                          "prelude_flows_max", "mbufs"});
  if (!t) {
    if (c->engine == EngineKind::kDpdk) {
      fail(0, "dpdk",
           "gateway.engine = \"dpdk\" needs a [dpdk] section (eal_args, ports, local_ips, routes, "
           "spill_listen)");
    }
    return;
  }
  if (c->engine != EngineKind::kDpdk) {
    t->fail_at("ports", "a [dpdk] section is only read with gateway.engine = \"dpdk\"");
  }
  DpdkConfig& d = c->dpdk;
  read_devices(*t, d);
  read_local_addresses(*t, d);
  read_routes(*t, d);
  read_spill_listen(*t, d);
  read_flow_limits(*t, d);
  check_engine_addresses(c);
}

}  // namespace sluice::control::config_detail
