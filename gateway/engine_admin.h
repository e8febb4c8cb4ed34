// The admin API's view of the io_uring engine's sessions (control::SessionsAdmin): the session
// list, totals and the engine's metrics, on the control thread.
#pragma once

#include "control/sessions_admin.h"
#include "dataplane/uring/engine.h"

namespace sluice::gateway {

class EngineAdmin : public control::SessionsAdmin {
 public:
  explicit EngineAdmin(uring::Engine& engine) : engine_(engine) {}
  std::vector<control::SessionInfo> sessions(size_t limit, size_t* total,
                                             std::vector<uint32_t>* unanswered) override;
  control::SessionTotals totals() override;
  std::string metrics_text() override;

 private:
  uring::Engine& engine_;
};

}  // namespace sluice::gateway
