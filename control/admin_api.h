// The admin API's routes: what each endpoint of sluiced's HTTP/JSON API does to Control. The
// endpoints are listed in doc/operations.md ("Admin API"); sluicectl is a thin client of them.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "control/admin_server.h"
#include "control/control.h"
#include "control/sessions_admin.h"
#include "control/spill_admin.h"

namespace sluice::control {

// Most queues one GET /v1/queues answers with (the rest are counted in "total").
inline constexpr size_t kQueuesListMax = 100'000;
// Sessions one GET /v1/sessions answers with when it names no limit, and at most.
inline constexpr size_t kSessionsListDefault = 1'000;
inline constexpr size_t kSessionsListMax = 100'000;

class AdminApi {
 public:
  // `reload` re-reads the config file as SIGHUP does; error text, or nullopt when applied.
  using Reload = std::function<Result<>()>;
  AdminApi(Control& control, Reload reload);
  // The spill log's routes (/v1/spill...) answer 503 until one is set.
  void set_spill(SpillAdmin* spill) { spill_ = spill; }
  // The dataplane's sessions (/v1/sessions) answer 503 until one is set.
  void set_sessions(SessionsAdmin* sessions) { sessions_ = sessions; }

  AdminResponse handle(const AdminRequest& request);

 private:
  AdminResponse status(const AdminRequest& r);
  AdminResponse nodes(const AdminRequest& r);
  AdminResponse queues(const AdminRequest& r);
  AdminResponse queue(const AdminRequest& r);
  AdminResponse pins(const AdminRequest& r);
  AdminResponse settings(const AdminRequest& r);
  AdminResponse reload(const AdminRequest& r);
  AdminResponse spill(const AdminRequest& r);
  AdminResponse sessions(const AdminRequest& r);

  Control& control_;
  Reload reload_;
  SpillAdmin* spill_ = nullptr;
  SessionsAdmin* sessions_ = nullptr;
};

}  // namespace sluice::control
