// The admin API's view of the io_uring engine's sessions (control::SessionsAdmin): the session
// list, totals and the engine's metrics, on the control thread.
#pragma once

#include <memory>
#include <vector>

#include "control/sessions_admin.h"
#include "dataplane/uring/engine.h"

namespace sluice::gateway {

class LoginVerifier;
class SpillAuth;

// What checks the spill logins, for the metrics: each worker's SpillAuth and the verifier
// thread they share.
struct SpillLogins {
  std::vector<const SpillAuth*> auths;
  std::shared_ptr<const LoginVerifier> verifier;  // null: the checks run on the workers
};

class EngineAdmin : public control::SessionsAdmin {
 public:
  explicit EngineAdmin(uring::Engine& engine, SpillLogins logins = {})
      : engine_(engine), logins_(std::move(logins)) {}
  std::vector<control::SessionInfo> sessions(size_t limit, size_t* total,
                                             std::vector<uint32_t>* unanswered) override;
  control::SessionTotals totals() override;
  std::string metrics_text() override;

 private:
  uring::Engine& engine_;
  SpillLogins logins_;
};

}  // namespace sluice::gateway
