// Tests of the admin API's routes, called directly (the transport has tests of its own): JSON
// shapes, statuses and the error line of every refusal.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "control/admin_api.h"
#include "control/log.h"
#include "tests/unit/result_util.h"

namespace sluice::control {
namespace {

using nlohmann::json;

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-admin-api-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    set_log_sink(&log_);
    GatewayConfig c;
    c.state_dir = dir_;
    c.nodes = {NodeSpec{"n0", "127.0.0.1", 1, 100}, NodeSpec{"n1", "127.0.0.1", 2, 50}};
    c.broker_node_names = {"rabbit@n0", ""};
    c.pins = {PinSpec{"/", "configured", "n1"}};
    control_ = std::make_unique<Control>(io_, c, Secrets{});
    ASSERT_EQ(sluice::error_of(control_->load_state()), "");
    api_ = std::make_unique<AdminApi>(*control_, [this]() -> Result<> {
      ++reloads_;
      if (reload_error_) return failure(*reload_error_);
      return {};
    });
  }
  void TearDown() override {
    api_.reset();
    control_.reset();
    set_log_sink(nullptr);
    std::filesystem::remove_all(dir_);
  }

  AdminResponse call(std::string method, std::string path, std::string body = {},
                     std::map<std::string, std::string> query = {}) {
    return api_->handle(
        AdminRequest{std::move(method), std::move(path), std::move(query), std::move(body)});
  }
  static json body(const AdminResponse& r) { return json::parse(r.body); }
  static std::string error_of(const AdminResponse& r) {
    return body(r).at("error").get<std::string>();
  }

  std::string dir_;
  std::string log_;
  boost::asio::io_context io_;
  std::unique_ptr<Control> control_;
  std::unique_ptr<AdminApi> api_;
  int reloads_ = 0;
  std::optional<std::string> reload_error_;
};

TEST_F(AdminApiTest, StatusSummarisesTheGateway) {
  AdminResponse r = call("GET", "/v1/status");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.content_type, "application/json");
  json j = body(r);
  EXPECT_EQ(j["version"], SLUICE_VERSION);
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["queues"], 1);
  EXPECT_EQ(j["pinned"], 1);
  EXPECT_EQ(j["placement_policy"], "rendezvous");
  EXPECT_EQ(j["feed"]["enabled"], false);
  EXPECT_EQ(call("POST", "/v1/status").status, 405u);
}

TEST_F(AdminApiTest, NodesListAndOneNode) {
  json j = body(call("GET", "/v1/nodes"));
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][0]["name"], "n0");
  EXPECT_EQ(j["nodes"][0]["address"], "127.0.0.1:1");
  EXPECT_EQ(j["nodes"][0]["broker_node"], "rabbit@n0");
  EXPECT_EQ(j["nodes"][1]["weight"], 50);
  EXPECT_EQ(j["nodes"][1]["queues"], 1);
  EXPECT_EQ(j["nodes"][1]["admin"], "up");
  json one = body(call("GET", "/v1/nodes/n1"));
  EXPECT_EQ(one["name"], "n1");
  AdminResponse missing = call("GET", "/v1/nodes/n7");
  EXPECT_EQ(missing.status, 404u);
  EXPECT_EQ(error_of(missing), "no node named \"n7\"");
}

TEST_F(AdminApiTest, NodeAdminStateChanges) {
  AdminResponse r = call("PUT", "/v1/nodes/n0/admin", R"({"state": "maintenance"})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["admin"], "maintenance");
  EXPECT_EQ(control_->node("n0")->admin, AdminState::kMaintenance);
  r = call("PUT", "/v1/nodes/n0/admin", R"({"state": "asleep"})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(error_of(r).find("\"up\", \"drain\" or \"maintenance\""), std::string::npos);
  r = call("PUT", "/v1/nodes/n0/admin", R"({"mode": "up"})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(error_of(r).find("missing \"state\""), std::string::npos);
  r = call("PUT", "/v1/nodes/n0/admin", "{not json");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(error_of(r), "the request body is not valid JSON");
  r = call("PUT", "/v1/nodes/zz/admin", R"({"state": "up"})");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(call("POST", "/v1/nodes/n0/admin", R"({"state": "up"})").status, 405u);
  EXPECT_EQ(call("GET", "/v1/nodes/n0/other").status, 404u);
}

TEST_F(AdminApiTest, PinShowAndUnpinOneQueue) {
  AdminResponse r = call("POST", "/v1/pins", R"({"vhost": "/", "queue": "orders", "node": "n0"})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["node"], "n0");
  EXPECT_EQ(body(r)["source"], "pinned");
  json q = body(call("GET", "/v1/queue", {}, {{"vhost", "/"}, {"queue", "orders"}}));
  EXPECT_EQ(q["pinned"], "n0");
  EXPECT_EQ(q["learned"], nullptr);
  r = call("DELETE", "/v1/pins", {}, {{"vhost", "/"}, {"queue", "orders"}});
  EXPECT_EQ(r.status, 200u);
  r = call("DELETE", "/v1/pins", {}, {{"vhost", "/"}, {"queue", "orders"}});
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(error_of(r), "queue \"orders\" in vhost \"/\" is not pinned");
  r = call("GET", "/v1/queue", {}, {{"vhost", "/"}, {"queue", "orders"}});
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(error_of(r).find("has no owner yet"), std::string::npos);
  EXPECT_EQ(call("GET", "/v1/queue", {}, {{"vhost", "/"}}).status, 400u);
}

TEST_F(AdminApiTest, PinBatchAndItsErrors) {
  json batch = {{"pins", json::array()}};
  for (int i = 0; i < 100; ++i) {
    batch["pins"].push_back({{"vhost", "/"}, {"queue", "q" + std::to_string(i)}, {"node", "n1"}});
  }
  AdminResponse r = call("POST", "/v1/pins", batch.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["pinned"], 100);
  EXPECT_EQ(control_->summary().pinned, 101u);
  r = call("POST", "/v1/pins", R"({"pins": [{"vhost": "/", "queue": "x"}]})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(error_of(r), "pins[0]: missing \"node\"");
  r = call("POST", "/v1/pins", R"({"pins": [{"vhost": "/", "queue": 7, "node": "n0"}]})");
  EXPECT_EQ(error_of(r), "pins[0]: \"queue\" must be a string");
  r = call("POST", "/v1/pins", R"({"vhost": "/", "queue": "x", "node": "n9"})");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(error_of(r).find("no node named \"n9\"; nodes are: n0, n1"), std::string::npos);
  r = call("POST", "/v1/pins", R"([1, 2])");
  EXPECT_EQ(error_of(r), "the request body must be a JSON object");
  EXPECT_EQ(call("GET", "/v1/pins").status, 405u);
}

// Batches in an unusual but valid shape leave the streaming reader for the document path, and
// are applied just the same; a bad pin anywhere refuses the whole batch.
TEST_F(AdminApiTest, PinBatchInAnyValidShapeIsApplied) {
  AdminResponse r = call("POST", "/v1/pins",
                         R"({"note": 1, "pins": [{"node": "n1", "extra": [true], "queue": "a",
                             "vhost": "/"}, {"vhost": "/", "queue": "b", "node": "n0"}]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["pinned"], 2);
  r = call("POST", "/v1/pins",
           R"({"pins": [{"vhost": "/", "queue": "c", "node": "n0", "node": "n1"}]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(control_->queue("/", "a").pinned, "n1");
  EXPECT_EQ(control_->queue("/", "b").pinned, "n0");
  EXPECT_EQ(control_->queue("/", "c").pinned, "n1");  // a repeated member: the last one counts
  r = call("POST", "/v1/pins", R"({"pins": []})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["pinned"], 0);
  r = call("POST", "/v1/pins",
           R"({"pins": [{"vhost": "/", "queue": "d", "node": "n0"}, {"vhost": "/", "queue": "e",
               "node": "n7"}]})");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(error_of(r).find("pins[1]: no node named \"n7\""), std::string::npos) << r.body;
  EXPECT_FALSE(control_->queue("/", "d").owner.has_value());
  r = call("POST", "/v1/pins", R"({"pins": [{"vhost": "/", "queue": "f", "node": "n0"})");
  EXPECT_EQ(error_of(r), "the request body is not valid JSON");
  EXPECT_FALSE(control_->queue("/", "f").owner.has_value());
}

TEST_F(AdminApiTest, QueuesFilterAndLimit) {
  ASSERT_EQ(call("POST", "/v1/pins", R"({"vhost": "v2", "queue": "a", "node": "n0"})").status,
            200u);
  FeedPoll poll;
  poll.ok = true;
  poll.queues = {LearnedQueue{"/", "learned-one", "rabbit@n0"}};
  control_->on_feed(poll);
  json all = body(call("GET", "/v1/queues"));
  EXPECT_EQ(all["total"], 3);
  EXPECT_EQ(all["truncated"], false);
  json v2 = body(call("GET", "/v1/queues", {}, {{"vhost", "v2"}}));
  ASSERT_EQ(v2["queues"].size(), 1u);
  EXPECT_EQ(v2["queues"][0]["queue"], "a");
  json learned = body(call("GET", "/v1/queues", {}, {{"source", "learned"}}));
  ASSERT_EQ(learned["queues"].size(), 1u);
  EXPECT_EQ(learned["queues"][0]["node"], "n0");
  json limited = body(call("GET", "/v1/queues", {}, {{"limit", "1"}}));
  EXPECT_EQ(limited["queues"].size(), 1u);
  EXPECT_EQ(limited["total"], 3);
  EXPECT_EQ(limited["truncated"], true);
  EXPECT_EQ(call("GET", "/v1/queues", {}, {{"source", "guessed"}}).status, 400u);
  EXPECT_EQ(call("GET", "/v1/queues", {}, {{"limit", "0"}}).status, 400u);
  EXPECT_EQ(call("GET", "/v1/queues", {}, {{"limit", "ten"}}).status, 400u);
}

TEST_F(AdminApiTest, SettingsGetAndSet) {
  json all = body(call("GET", "/v1/settings"));
  EXPECT_EQ(all["settings"]["log_level"], "info");
  EXPECT_EQ(all["settings"]["health.rise"], "2");
  AdminResponse r = call("PUT", "/v1/settings/health.rise", R"({"value": 4})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["value"], "4");
  EXPECT_EQ(body(call("GET", "/v1/settings/health.rise"))["value"], "4");
  r = call("PUT", "/v1/settings/health.rise", R"({"value": "0"})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(error_of(r), "health.rise: must be between 1 and 100");
  r = call("PUT", "/v1/settings/health.rise", R"({"value": -1})");
  EXPECT_EQ(r.status, 400u);
  r = call("PUT", "/v1/settings/colour", R"({"value": "red"})");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(call("GET", "/v1/settings/colour").status, 404u);
  EXPECT_EQ(call("PUT", "/v1/settings/log_level", "{}").status, 400u);
  set_log_level(LogLevel::kInfo);
}

TEST_F(AdminApiTest, MetricsAndReloadAndUnknownPaths) {
  AdminResponse m = call("GET", "/metrics");
  EXPECT_EQ(m.status, 200u);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("sluice_ownership_entries{source=\"pinned\"} 1\n"), std::string::npos);
  EXPECT_EQ(call("POST", "/v1/reload").status, 200u);
  EXPECT_EQ(reloads_, 1);
  reload_error_ = "t.toml:3: nodes[0].weight: must be between 1 and 10000";
  AdminResponse r = call("POST", "/v1/reload");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(error_of(r), *reload_error_);
  r = call("GET", "/v2/everything");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(error_of(r).find("no endpoint /v2/everything"), std::string::npos);
}

TEST_F(AdminApiTest, NamesThatAreNotUtf8AreAnsweredNotThrown) {
  FeedPoll poll;
  poll.ok = true;
  poll.queues = {LearnedQueue{"/", std::string("bad\xff\xfe"), "rabbit@n0"}};
  control_->on_feed(poll);
  AdminResponse r = call("GET", "/v1/queues", {}, {{"source", "learned"}});
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(body(r)["queues"].size(), 1u);
}

}  // namespace
}  // namespace sluice::control

namespace sluice::control {
namespace {

// The spill log as the admin API sees it, with one queue holding a backlog.
class FakeSpill : public SpillAdmin {
 public:
  SpillTotals totals() override { return SpillTotals{"/var/spill", 3, 300, 1000, 1}; }
  std::vector<SpillQueueInfo> queues() override {
    if (purged_) return {};
    return {SpillQueueInfo{"/", "configured", 3, 300, 1, 2500, 1u, "waiting: owner down"}};
  }
  bool drain_now(std::string_view vhost, std::string_view queue) override {
    drains_.push_back(std::string(vhost) + "/" + std::string(queue));
    return !purged_ && vhost == "/" && queue == "configured";
  }
  std::optional<uint64_t> purge(std::string_view vhost, std::string_view queue) override {
    if (purged_ || vhost != "/" || queue != "configured") return std::nullopt;
    purged_ = true;
    return 3;
  }
  std::string metrics_text() override { return "# TYPE sluice_spill_appends_total counter\n"; }

  std::vector<std::string> drains_;
  bool purged_ = false;
};

TEST_F(AdminApiTest, SpillRoutesShowDrainAndPurgeWithConfirmation) {
  EXPECT_EQ(call("GET", "/v1/spill").status, 503u);
  FakeSpill spill;
  api_->set_spill(&spill);
  AdminResponse r = call("GET", "/v1/spill");
  ASSERT_EQ(r.status, 200u) << r.body;
  json j = body(r);
  EXPECT_EQ(j["dir"], "/var/spill");
  EXPECT_EQ(j["messages"], 3);
  EXPECT_EQ(j["max_bytes"], 1000);
  ASSERT_EQ(j["queues"].size(), 1u);
  const json& q = j["queues"][0];
  EXPECT_EQ(q["queue"], "configured");
  EXPECT_EQ(q["messages"], 3);
  EXPECT_EQ(q["pending"], 1);
  EXPECT_EQ(q["oldest_age_s"], 2.5);
  EXPECT_EQ(q["owner"], "n1");  // the config pins it there
  EXPECT_EQ(q["state"], "waiting: owner down");
  EXPECT_NE(call("GET", "/metrics").body.find("sluice_spill_appends_total"), std::string::npos);

  EXPECT_EQ(call("GET", "/v1/spill/drain").status, 405u);
  EXPECT_EQ(call("POST", "/v1/spill/flush").status, 404u);
  r = call("POST", "/v1/spill/drain", {}, {{"vhost", "/"}});
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(error_of(r).find("vhost and queue are required"), std::string::npos);
  r = call("POST", "/v1/spill/drain", {}, {{"vhost", "/"}, {"queue", "configured"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["drain"], "requested");
  r = call("POST", "/v1/spill/drain", {}, {{"vhost", "/"}, {"queue", "other"}});
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(error_of(r), "queue \"other\" in vhost \"/\" has no spill backlog");
  EXPECT_EQ(spill.drains_, (std::vector<std::string>{"//configured", "//other"}));

  r = call("POST", "/v1/spill/purge", {}, {{"vhost", "/"}, {"queue", "configured"}});
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(error_of(r).find("confirm=yes"), std::string::npos);
  EXPECT_FALSE(spill.purged_);
  r = call("POST", "/v1/spill/purge", {},
           {{"vhost", "/"}, {"queue", "configured"}, {"confirm", "yes"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(body(r)["purged"], 3);
  EXPECT_NE(log_.find("level=warn event=spill_purged vhost=/ queue=configured messages=3"),
            std::string::npos)
      << log_;
  r = call("POST", "/v1/spill/purge", {},
           {{"vhost", "/"}, {"queue", "configured"}, {"confirm", "yes"}});
  EXPECT_EQ(r.status, 404u);
  EXPECT_TRUE(body(call("GET", "/v1/spill"))["queues"].empty());
}

}  // namespace
}  // namespace sluice::control

namespace sluice::control {
namespace {

// The engine's sessions as the admin API sees them: 3 in all, the limit the API asked for kept.
class FakeSessions : public SessionsAdmin {
 public:
  std::vector<SessionInfo> sessions(size_t limit, size_t* total,
                                    std::vector<uint32_t>* unanswered) override {
    limits_.push_back(limit);
    *unanswered = unanswered_;
    std::vector<SessionInfo> all = {
        SessionInfo{0, 7, "10.0.0.7:51234", "", "", "", "prelude", false, 120, 0, 15},
        SessionInfo{0, 9, "10.0.0.8:40000", "/", "orders", "n1", "spliced", true, 4096, 1 << 20,
                    62'000},
        SessionInfo{1, 12, "10.0.0.9:40001", "/", "audit", "", "spill", false, 300, 80, 1'500},
    };
    *total = all.size();
    if (all.size() > limit) all.resize(limit);
    return all;
  }
  SessionTotals totals() override { return SessionTotals{3, 1, 1, 1, 40, 2, 1}; }
  std::string metrics_text() override { return "# TYPE sluice_sessions_active gauge\n"; }

  std::vector<size_t> limits_;
  std::vector<uint32_t> unanswered_;  // workers that "did not answer"
};

TEST_F(AdminApiTest, SessionsAnswer503UntilTheGatewaySetsThem) {
  AdminResponse r = call("GET", "/v1/sessions");
  EXPECT_EQ(r.status, 503u);
  EXPECT_EQ(error_of(r), "the dataplane's sessions are not available");
  EXPECT_FALSE(body(call("GET", "/v1/status")).contains("sessions"));
  EXPECT_EQ(call("GET", "/metrics").body.find("sluice_sessions_active"), std::string::npos);
}

TEST_F(AdminApiTest, SessionsListEverySessionField) {
  FakeSessions sessions;
  api_->set_sessions(&sessions);
  AdminResponse r = call("GET", "/v1/sessions");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json j = body(r);
  EXPECT_EQ(j["total"], 3);
  EXPECT_EQ(j["truncated"], false);
  EXPECT_EQ(j["unanswered_workers"], json::array());
  ASSERT_EQ(j["sessions"].size(), 3u);
  EXPECT_EQ(j["sessions"][1], (json{{"worker", 0},
                                    {"id", 9},
                                    {"client", "10.0.0.8:40000"},
                                    {"vhost", "/"},
                                    {"queue", "orders"},
                                    {"owner", "n1"},
                                    {"state", "spliced"},
                                    {"parked", true},
                                    {"bytes_in", 4096},
                                    {"bytes_out", 1 << 20},
                                    {"age_ms", 62'000}}));
  EXPECT_EQ(j["sessions"][0]["state"], "prelude");
  EXPECT_EQ(j["sessions"][0]["parked"], false);
  EXPECT_EQ(j["sessions"][0]["vhost"], "");
  EXPECT_EQ(j["sessions"][2]["worker"], 1);
  EXPECT_EQ(sessions.limits_, std::vector<size_t>{kSessionsListDefault});
  EXPECT_EQ(call("POST", "/v1/sessions").status, 405u);
  EXPECT_EQ(call("GET", "/v1/sessions/7").status, 404u);
}

// Workers that did not answer in time are named in the answer, not left out silently.
TEST_F(AdminApiTest, SessionsNameTheWorkersThatDidNotAnswer) {
  FakeSessions sessions;
  sessions.unanswered_ = {2, 5};
  api_->set_sessions(&sessions);
  AdminResponse r = call("GET", "/v1/sessions");
  ASSERT_EQ(r.status, 200u) << r.body;
  json j = body(r);
  EXPECT_EQ(j["unanswered_workers"], (json{2, 5}));
  EXPECT_EQ(j["total"], 3);
  EXPECT_EQ(j["sessions"].size(), 3u);
}

TEST_F(AdminApiTest, SessionsLimitIsCheckedAndPassedOn) {
  FakeSessions sessions;
  api_->set_sessions(&sessions);
  json j = body(call("GET", "/v1/sessions", {}, {{"limit", "2"}}));
  EXPECT_EQ(j["sessions"].size(), 2u);
  EXPECT_EQ(j["total"], 3);
  EXPECT_EQ(j["truncated"], true);
  ASSERT_EQ(call("GET", "/v1/sessions", {}, {{"limit", "100000"}}).status, 200u);
  EXPECT_EQ(sessions.limits_, (std::vector<size_t>{2, kSessionsListMax}));
  for (const char* bad : {"0", "100001", "ten", "-1", "5x", ""}) {
    AdminResponse r = call("GET", "/v1/sessions", {}, {{"limit", bad}});
    EXPECT_EQ(r.status, 400u) << bad;
    EXPECT_EQ(error_of(r),
              "limit must be a whole number from 1 to 100000, not \"" + std::string(bad) + "\"");
  }
  EXPECT_EQ(sessions.limits_.size(), 2u);  // refused limits never reach the engine
}

TEST_F(AdminApiTest, SessionTotalsInStatusAndEngineFamiliesInMetrics) {
  FakeSessions sessions;
  api_->set_sessions(&sessions);
  json s = body(call("GET", "/v1/status"))["sessions"];
  EXPECT_EQ(s, (json{{"active", 3},
                     {"prelude", 1},
                     {"spliced", 1},
                     {"spill", 1},
                     {"accepted", 40},
                     {"refused", 2},
                     {"parked", 1}}));
  const std::string m = call("GET", "/metrics").body;
  EXPECT_NE(m.find("# TYPE sluice_sessions_active gauge\n"), std::string::npos);
  EXPECT_NE(m.find("sluice_ownership_entries"), std::string::npos);  // control's own stay
}

}  // namespace
}  // namespace sluice::control
