// The DPDK engine in sluiced (gateway.engine = "dpdk"): the EAL, the ports, one lcore
// running the splicer over a replica of control's decisions, and what the admin API shows of
// it. DPDK's headers stay in the .cc.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "control/config.h"
#include "control/control.h"
#include "control/router.h"
#include "control/sessions_admin.h"

namespace sluice::gateway {

class DpdkEngine {
 public:
  // Starts the EAL, opens the ports and builds the lcore; nothing polls until start(). The
  // error names the config key or the device.
  static Result<std::unique_ptr<DpdkEngine>> open(const control::GatewayConfig& config,
                                                  control::Control::Worker worker,
                                                  control::NodeDirectory& directory);
  ~DpdkEngine();

  void start();
  // Stops the lcore thread and the ports.
  void stop();

  // For the admin API, from the control thread: the last snapshot the lcore published
  // (at most 100 ms old).
  control::DataplaneStatus status() const;
  std::string metrics_text() const;
  // The lcore's oldest `limit` sessions (every flow but the lingering ones, oldest first) and
  // in *total how many there are, listed by the lcore over its next ticks (one every 0.5 ms,
  // 4,096 entries of its flow table each); nothing if it did not answer within `wait`.
  // `worker` and the id's top bits are left to DpdkAdmin. From one thread (the admin API's).
  std::optional<std::vector<control::SessionInfo>> sessions(size_t limit,
                                                            std::chrono::milliseconds wait,
                                                            size_t* total) const;

 private:
  struct Impl;
  explicit DpdkEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The admin API's view in DPDK mode: the spill sessions of the io_uring engine (the spill
// listener) and the DPDK engine's flows, ports and lcore. The lcore's sessions are listed
// after the io_uring workers', as worker `lcore_worker` (the number of io_uring workers).
class DpdkAdmin : public control::SessionsAdmin {
 public:
  static constexpr std::chrono::milliseconds kSessionsWait{1000};
  DpdkAdmin(control::SessionsAdmin& uring, DpdkEngine& dpdk, uint32_t lcore_worker)
      : uring_(uring), dpdk_(dpdk), lcore_worker_(lcore_worker) {}
  std::vector<control::SessionInfo> sessions(size_t limit, size_t* total,
                                             std::vector<uint32_t>* unanswered) override;
  control::SessionTotals totals() override;
  std::string metrics_text() override { return uring_.metrics_text() + dpdk_.metrics_text(); }
  std::optional<control::DataplaneStatus> dataplane() override { return dpdk_.status(); }

 private:
  control::SessionsAdmin& uring_;
  DpdkEngine& dpdk_;
  uint32_t lcore_worker_;
};

}  // namespace sluice::gateway
