// The spill log and the drainer inside sluiced (DESIGN section 6): the log recovered at start,
// its backlog events taken to control (the drain barrier), the drainer routed by its own replica
// of control's decisions, and the admin API's view of both.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "control/config.h"
#include "control/control.h"
#include "control/spill_admin.h"
#include "queue/drainer.h"
#include "queue/spill_log.h"

namespace sluice::gateway {

class SpillService : public control::SpillAdmin {
 public:
  // Recovers the spill directory (every problem recovery meets is logged) and attaches the
  // drainer's replica to control, which must not have started yet. An error naming the
  // directory or file and what to do when the log cannot be used.
  static Result<std::unique_ptr<SpillService>> open(const control::GatewayConfig& config,
                                                    const control::Secrets& secrets,
                                                    control::Control& control,
                                                    boost::asio::io_context& io);
  ~SpillService() override;
  SpillService(const SpillService&) = delete;
  SpillService& operator=(const SpillService&) = delete;

  // The spill thread and the drainer.
  void start();
  // The drainer first (what it has in flight is sent again next time), then the log, which
  // answers every append and writes its cursors.
  void stop();
  // After a reload added nodes: where the drainer finds them.
  void set_nodes(std::vector<control::NodeSpec> nodes);
  // spill.max_bytes, spill.queue_messages_max, spill.queue_bytes_max and
  // drain.rate_per_second while running (any thread): empty when applied, otherwise why not
  // (nothing changed).
  Result<> set_tuning(uint64_t max_bytes, uint64_t queue_messages_max, uint64_t queue_bytes_max,
                      uint32_t drain_rate_per_second);
  queue::SpillLog& log() { return *log_; }

  // control::SpillAdmin, on the control thread.
  control::SpillTotals totals() override;
  std::vector<control::SpillQueueInfo> queues() override;
  bool drain_now(std::string_view vhost, std::string_view queue) override;
  std::optional<uint64_t> purge(std::string_view vhost, std::string_view queue) override;
  std::string metrics_text() override;

 private:
  explicit SpillService(const control::GatewayConfig& config);
  // On the drainer's thread.
  void apply_control_messages();
  std::optional<queue::DrainTarget> route(std::string_view vhost, std::string_view queue);

  std::string dir_;
  std::unique_ptr<queue::SpillLog> log_;
  std::unique_ptr<queue::Drainer> drainer_;
  control::Control::Worker worker_;  // its replica is the drainer thread's alone
  std::mutex nodes_mutex_;
  std::vector<control::NodeSpec> nodes_;
  bool started_ = false;
};

}  // namespace sluice::gateway
