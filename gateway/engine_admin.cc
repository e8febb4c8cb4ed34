#include "gateway/engine_admin.h"

#include <string>

#include "dataplane/session/prelude.h"
#include "dataplane/session/spill_session.h"
#include "gateway/login_verifier.h"
#include "gateway/metrics_families.h"
#include "gateway/spill_auth.h"

namespace sluice::gateway {

namespace {

uint64_t get(const std::atomic<uint64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

}  // namespace

std::vector<control::SessionInfo> EngineAdmin::sessions(size_t limit, size_t* total,
                                                        std::vector<uint32_t>* unanswered) {
  std::vector<control::SessionInfo> out;
  for (uring::SessionView& v : engine_.sessions(limit, total, unanswered)) {
    control::SessionInfo i;
    i.worker = v.worker;
    i.id = v.id;
    i.client = std::move(v.client);
    i.vhost = std::move(v.vhost);
    i.queue = std::move(v.queue);
    i.owner = std::move(v.owner);
    i.state = std::move(v.state);
    i.parked = v.parked;
    i.bytes_in = v.bytes_in;
    i.bytes_out = v.bytes_out;
    i.age_ms = v.age_ms;
    out.push_back(std::move(i));
  }
  return out;
}

control::SessionTotals EngineAdmin::totals() {
  control::SessionTotals t;
  for (size_t w = 0; w < engine_.worker_count(); ++w) {
    const uring::WorkerCounters& c = engine_.counters(w);
    t.active += get(c.active);
    t.prelude += get(c.prelude);
    t.spliced += get(c.splicing);
    t.parked += get(c.parked);
    t.spill += get(c.spilling);
    t.accepted += get(c.accepted);
    t.refused += get(c.refused_sessions_max) + get(c.refused_per_source) +
                 get(c.refused_prelude_max) + get(c.refused_stopping);
  }
  return t;
}

namespace {

using C = uring::WorkerCounters;
using Field = const std::atomic<uint64_t> C::*;

// A family with one sample per worker, labelled by the worker's number.
void per_worker(Families& f, const uring::Engine& engine, const char* name, const char* type,
                const char* help, Field field) {
  f.family(name, type, help);
  for (size_t w = 0; w < engine.worker_count(); ++w)
    f.sample(name, "worker=\"" + std::to_string(w) + "\"", double(get(engine.counters(w).*field)));
}

// The families of the workers' counters and gauges, one sample per worker.
void worker_families(Families& f, const uring::Engine& e) {
  per_worker(f, e, "sluice_sessions_accepted_total", "counter", "Client connections accepted.",
             &C::accepted);
  per_worker(f, e, "sluice_sessions_active", "gauge", "Sessions open, every state.", &C::active);
  per_worker(f, e, "sluice_sessions_prelude", "gauge", "Sessions in prelude.", &C::prelude);
  per_worker(f, e, "sluice_sessions_spliced", "gauge", "Sessions spliced to their owner.",
             &C::splicing);
  per_worker(f, e, "sluice_sessions_spill", "gauge", "Sessions served from the spill log.",
             &C::spilling);
  per_worker(f, e, "sluice_sessions_spliced_total", "counter", "Sessions that reached the splice.",
             &C::spliced);
  per_worker(f, e, "sluice_sessions_spilled_total", "counter",
             "Sessions that became spill sessions.", &C::spilled);
  per_worker(f, e, "sluice_owner_connect_failures_total", "counter",
             "Connects to an owner refused or timed out (passive health reports).",
             &C::connect_failed);
  per_worker(f, e, "sluice_owner_errors_total", "counter",
             "Replays the owner answered with ERROR (forwarded to the client).", &C::owner_error);
  per_worker(f, e, "sluice_owner_protocol_errors_total", "counter",
             "Owners that answered the replay with something other than CONNECTED or closed.",
             &C::owner_protocol);
  per_worker(f, e, "sluice_owner_timeouts_total", "counter",
             "Owners that did not answer the replay within connect_timeout_ms.", &C::owner_timeout);
  per_worker(f, e, "sluice_splice_resets_total", "counter",
             "Spliced sessions ended by a reset or socket error.", &C::resets);
  per_worker(f, e, "sluice_splice_bytes_in_total", "counter", "Bytes spliced client to owner.",
             &C::bytes_in);
  per_worker(f, e, "sluice_splice_bytes_out_total", "counter", "Bytes spliced owner to client.",
             &C::bytes_out);
  per_worker(f, e, "sluice_splice_pipes_grown_total", "counter",
             "Splice pipes grown to limits.pipe_bytes_max for a stream that filled one.",
             &C::pipes_grown);
  per_worker(f, e, "sluice_splice_grown_pipes", "gauge",
             "Grown splice pipes held, in use or kept for the next stream.", &C::grown_pipes);
  per_worker(f, e, "sluice_splice_parks_total", "counter",
             "Idle spliced sessions whose descriptors went to the ring's fixed-file table.",
             &C::parks);
  per_worker(f, e, "sluice_splice_unparks_total", "counter",
             "Parked sessions that got their descriptors back when bytes arrived.", &C::unparks);
  per_worker(f, e, "sluice_splice_unpark_failed_total", "counter",
             "Parked sessions closed because their descriptors could not come back (EMFILE).",
             &C::unpark_failed);
  per_worker(f, e, "sluice_splice_parked", "gauge", "Spliced sessions parked now.", &C::parked);
  per_worker(f, e, "sluice_spill_session_appends_total", "counter",
             "SENDs of spill sessions handed to the spill log.", &C::appends);
  per_worker(f, e, "sluice_spill_session_appends_busy_total", "counter",
             "Appends held back because the spill log's ring was full.", &C::appends_busy);
  per_worker(f, e, "sluice_header_tables", "gauge",
             "Header tables the prelude slots hold (made on a slot's first use, then reused).",
             &C::header_tables);
}

// A counter summed over the workers; `pick` chooses it among a worker's counters.
template <typename Pick>
double sum_over_workers(const uring::Engine& engine, Pick&& pick) {
  uint64_t sum = 0;
  for (size_t w = 0; w < engine.worker_count(); ++w)
    sum += get(pick(engine.counters(w)));
  return double(sum);
}

double total(const uring::Engine& engine, Field field) {
  return sum_over_workers(engine,
                          [field](const C& c) -> const std::atomic<uint64_t>& { return c.*field; });
}

// Sessions refused, by reason, summed over the workers.
void refused_family(Families& f, const uring::Engine& e) {
  f.family("sluice_sessions_refused_total", "counter",
           "Sessions refused at accept or routing, by reason.");
  const std::pair<const char*, Field> refused[] = {{"sessions_max", &C::refused_sessions_max},
                                                   {"per_source", &C::refused_per_source},
                                                   {"prelude_max", &C::refused_prelude_max},
                                                   {"spill_max", &C::refused_spill_max},
                                                   {"route", &C::refused_route},
                                                   {"stopping", &C::refused_stopping}};
  for (const auto& [reason, field] : refused)
    f.sample("sluice_sessions_refused_total", std::string("reason=\"") + reason + "\"",
             total(e, field));
}

// A counter family labelled by result, each result summed over the workers.
void by_result(Families& f, const uring::Engine& e, const char* name, const char* help,
               std::initializer_list<std::pair<const char*, Field>> results) {
  f.family(name, "counter", help);
  for (const auto& [result, field] : results)
    f.sample(name, std::string("result=\"") + result + "\"", total(e, field));
}

void login_and_heartbeat_families(Families& f, const uring::Engine& e) {
  by_result(f, e, "sluice_login_checks_total",
            "CONNECTs answered: by a node (accepted, refused), by the gateway because the node "
            "failed or none could check, or from the login cache.",
            {{"accepted", &C::login_accepted},
             {"refused", &C::login_refused},
             {"failed", &C::login_failed},
             {"unchecked", &C::login_unchecked},
             {"cached", &C::login_cached}});
  by_result(f, e, "sluice_login_connections_total",
            "Login check connections kept as the owner's connection or closed.",
            {{"kept", &C::login_conn_kept}, {"closed", &C::login_conn_closed}});
  by_result(
      f, e, "sluice_heartbeat_mismatches_total",
      "Owners whose heart-beat answer differs from what the client was told: refused "
      "(the owner would drop the client) or allowed (logged).",
      {{"refused", &C::heartbeat_mismatch_refused}, {"allowed", &C::heartbeat_mismatch_allowed}});
  f.one("sluice_heartbeats_sent_total", "counter",
        "Heart-beat EOLs the gateway sent to clients while it spoke for their sessions.",
        total(e, &C::heartbeats_sent));
}

void placement_families(Families& f, const uring::Engine& e) {
  f.one("sluice_placements_rate_limited_total", "counter",
        "Placements not recorded: the client address placed "
        "placement.placements_per_source_per_minute new queues this minute.",
        total(e, &C::placements_rate_limited));
  f.one("sluice_placements_confirmed_total", "counter",
        "Placements recorded after the owner accepted the session's login.",
        total(e, &C::placements_confirmed));
}

// Why preludes and spill sessions ended, by reason, summed over the workers.
void end_families(Families& f, const uring::Engine& e) {
  f.family("sluice_prelude_ends_total", "counter",
           "Preludes that ended without a destination, by reason (none: the client left).");
  for (size_t r = 0; r < session::kPreludeEndCount; ++r) {
    f.sample("sluice_prelude_ends_total",
             "reason=\"" + std::string(session::prelude_end_name(session::PreludeEnd(r))) + "\"",
             sum_over_workers(
                 e, [r](const C& c) -> const std::atomic<uint64_t>& { return c.prelude_end[r]; }));
  }
  // SpillEnd 0 is no ending, so it has no sample.
  f.family("sluice_spill_session_ends_total", "counter", "Spill sessions ended, by reason.");
  for (size_t r = 1; r < session::kSpillEndCount; ++r) {
    f.sample("sluice_spill_session_ends_total",
             "reason=\"" + std::string(session::spill_end_name(session::SpillEnd(r))) + "\"",
             sum_over_workers(
                 e, [r](const C& c) -> const std::atomic<uint64_t>& { return c.spill_end[r]; }));
  }
}

// The spill logins' checks (argon2id, on the verifier thread), summed over the workers.
void spill_login_families(Families& f, const SpillLogins& logins) {
  SpillAuthStats sum;
  for (const SpillAuth* a : logins.auths) {
    const SpillAuthStats s = a->stats();
    sum.verifications += s.verifications;
    sum.cache_hits += s.cache_hits;
    sum.refused += s.refused;
    sum.busy += s.busy;
    sum.denied += s.denied;
  }
  f.one("sluice_spill_login_cache_hits_total", "counter",
        "Spill logins accepted from the login cache, with no argon2id check.",
        double(sum.cache_hits));
  f.one("sluice_spill_login_verifications_total", "counter",
        "argon2id checks of spill logins started or queued (an unknown user's decoy check "
        "included).",
        double(sum.verifications));
  f.one("sluice_spill_login_verifications_waiting", "gauge",
        "Spill login checks queued for the verifier thread, not yet started.",
        double(logins.verifier ? logins.verifier->waiting() : 0));
  f.family("sluice_spill_logins_refused_total", "counter",
           "Spill logins refused: wrong or missing credentials (or a users file reloaded during "
           "the check), or busy (too many checks waiting: connect again later).");
  f.sample("sluice_spill_logins_refused_total", "reason=\"credentials\"", double(sum.refused));
  f.sample("sluice_spill_logins_refused_total", "reason=\"busy\"", double(sum.busy));
  f.one("sluice_spill_acl_denials_total", "counter",
        "Spill SENDs refused because the user's allow rules do not cover the queue.",
        double(sum.denied));
}

}  // namespace

std::string EngineAdmin::metrics_text() {
  Families f;
  worker_families(f, engine_);
  refused_family(f, engine_);
  login_and_heartbeat_families(f, engine_);
  placement_families(f, engine_);
  end_families(f, engine_);
  spill_login_families(f, logins_);
  return f.take();
}

}  // namespace sluice::gateway
