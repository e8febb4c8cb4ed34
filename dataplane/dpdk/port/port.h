// An Ethernet port (a NIC or a virtual device) opened by name, configured and started for the
// engine's lcores: queues, MTU, promiscuous mode, its MAC, offload report and counters.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "base/result.h"

namespace sluice::dpdk::port {

class MbufPool;

struct PortConfig {
  std::string device;  // the ethdev name, e.g. "net_af_packet0" as given in --vdev
  uint16_t rx_queues = 1, tx_queues = 1;
  uint16_t rx_ring = 1024, tx_ring = 1024;  // descriptors per queue (adjusted to the device)
  uint16_t mtu = 1500;
  bool promiscuous = false;
};

struct PortStats {
  uint64_t ipackets = 0;
  uint64_t opackets = 0;
  uint64_t ibytes = 0;
  uint64_t obytes = 0;
  uint64_t imissed = 0;  // dropped by the device: rx rings full
  uint64_t ierrors = 0;
  uint64_t oerrors = 0;
  uint64_t rx_nombuf = 0;  // rx failed for want of an mbuf
};

class Port {
 public:
  using MacAddr = std::array<uint8_t, 6>;

  // Finds `config.device`, configures its queues (rx buffers from `rx_pool`) and starts it, or
  // says which device and which step failed. Enables no offload.
  static Result<std::unique_ptr<Port>> open(const PortConfig& config, MbufPool& rx_pool);

  // Stops and closes the device.
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  uint16_t id() const { return id_; }
  const std::string& name() const { return name_; }
  const MacAddr& mac() const { return mac_; }
  uint16_t rx_queues() const { return rx_queues_; }
  uint16_t tx_queues() const { return tx_queues_; }
  // The device can compute IPv4 and TCP checksums on transmit (reported, not enabled).
  bool tx_checksum_offload() const { return tx_checksum_offload_; }

  // Counters since start; zeros when the device will not report them.
  PortStats stats() const;
  // Stops rx/tx (idempotent); the destructor also closes.
  void stop();

 private:
  Port(uint16_t id, std::string name) : id_(id), name_(std::move(name)) {}

  uint16_t id_;
  std::string name_;
  MacAddr mac_{};
  uint16_t rx_queues_ = 0;
  uint16_t tx_queues_ = 0;
  bool tx_checksum_offload_ = false;
  bool started_ = false;
};

}  // namespace sluice::dpdk::port
