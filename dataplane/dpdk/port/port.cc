// Port: ethdev configuration and start-up, each failure an error naming the device and the step.
#include "dataplane/dpdk/port/port.h"

#include <rte_ethdev.h>

#include <cstring>

#include "dataplane/dpdk/port/mbuf_pool.h"

namespace sluice::dpdk::port {
namespace {

tl::unexpected<Error> step_failed(const std::string& device, const std::string& step, int rc) {
  return failure("port '" + device + "': " + step + " failed: " + rte_strerror(-rc));
}

// The device's limits against what the config asks of it.
Result<> check_limits(const PortConfig& config, const rte_eth_dev_info& info) {
  const std::string& dev = config.device;
  if (config.rx_queues == 0 || config.tx_queues == 0) {
    return failure("port '" + dev + "': rx_queues and tx_queues must be at least 1");
  }
  if (config.rx_queues > info.max_rx_queues || config.tx_queues > info.max_tx_queues) {
    return failure("port '" + dev + "': " + std::to_string(config.rx_queues) + " rx / " +
                   std::to_string(config.tx_queues) + " tx queues asked, the device has at most " +
                   std::to_string(info.max_rx_queues) + " / " + std::to_string(info.max_tx_queues));
  }
  if (config.mtu < info.min_mtu || config.mtu > info.max_mtu) {
    return failure("port '" + dev + "': mtu " + std::to_string(config.mtu) +
                   " is outside the device's range " + std::to_string(info.min_mtu) + ".." +
                   std::to_string(info.max_mtu));
  }
  return {};
}

// Configures the device and sets its rx and tx queues up.
Result<> setup_queues(uint16_t id, const PortConfig& config, MbufPool& rx_pool) {
  const std::string& dev = config.device;
  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof(conf));
  conf.rxmode.mtu = config.mtu;
  if (int rc = rte_eth_dev_configure(id, config.rx_queues, config.tx_queues, &conf); rc != 0) {
    return step_failed(dev, "configure", rc);
  }
  uint16_t rx_ring = config.rx_ring;
  uint16_t tx_ring = config.tx_ring;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(id, &rx_ring, &tx_ring); rc != 0) {
    return step_failed(dev, "adjusting ring sizes", rc);
  }
  // SOCKET_ID_ANY (-1) when the device has no NUMA affinity; the queue calls take it as is.
  const auto queue_socket = static_cast<unsigned>(rte_eth_dev_socket_id(id));
  for (uint16_t q = 0; q < config.rx_queues; ++q) {
    const int rc = rte_eth_rx_queue_setup(id, q, rx_ring, queue_socket, nullptr, rx_pool.mempool());
    if (rc != 0) return step_failed(dev, "rx queue " + std::to_string(q) + " setup", rc);
  }
  for (uint16_t q = 0; q < config.tx_queues; ++q) {
    const int rc = rte_eth_tx_queue_setup(id, q, tx_ring, queue_socket, nullptr);
    if (rc != 0) return step_failed(dev, "tx queue " + std::to_string(q) + " setup", rc);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Port>> Port::open(const PortConfig& config, MbufPool& rx_pool) {
  const std::string& dev = config.device;
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(dev.c_str(), &id) != 0) {
    return failure("port '" + dev + "': no such device (is it given with --vdev or bound to a " +
                   "DPDK driver?)");
  }
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(id, &info); rc != 0) {
    return step_failed(dev, "reading device info", rc);
  }
  if (Result<> fits = check_limits(config, info); !fits) return tl::unexpected(fits.error());

  // From here the Port owns the device: its destructor closes it on any later failure.
  std::unique_ptr<Port> port(new Port(id, dev));
  if (Result<> set = setup_queues(id, config, rx_pool); !set) return tl::unexpected(set.error());
  if (config.promiscuous) {
    if (int rc = rte_eth_promiscuous_enable(id); rc != 0) {
      return step_failed(dev, "enabling promiscuous mode", rc);
    }
  }
  rte_ether_addr mac;
  if (int rc = rte_eth_macaddr_get(id, &mac); rc != 0) {
    return step_failed(dev, "reading the MAC address", rc);
  }
  std::memcpy(port->mac_.data(), mac.addr_bytes, port->mac_.size());
  if (int rc = rte_eth_dev_start(id); rc != 0) return step_failed(dev, "start", rc);
  port->started_ = true;
  port->rx_queues_ = config.rx_queues;
  port->tx_queues_ = config.tx_queues;
  constexpr uint64_t kChecksumOffloads =
      RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  port->tx_checksum_offload_ = (info.tx_offload_capa & kChecksumOffloads) == kChecksumOffloads;
  return port;
}

Port::~Port() {
  stop();
  rte_eth_dev_close(id_);
}

void Port::stop() {
  if (!started_) return;
  rte_eth_dev_stop(id_);
  started_ = false;
}

PortStats Port::stats() const {
  PortStats out;
  rte_eth_stats s;
  if (rte_eth_stats_get(id_, &s) != 0) return out;
  out.ipackets = s.ipackets;
  out.opackets = s.opackets;
  out.ibytes = s.ibytes;
  out.obytes = s.obytes;
  out.imissed = s.imissed;
  out.ierrors = s.ierrors;
  out.oerrors = s.oerrors;
  out.rx_nombuf = s.rx_nombuf;
  return out;
}

}  // namespace sluice::dpdk::port
