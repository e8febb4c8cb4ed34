#!/usr/bin/python3
"""sluiced with a spill backlog: the log recovered at start, the backlog of a queue whose owner is
up delivered to that real RabbitMQ node by sluiced's drainer, the backlog of a queue whose owner
is down shown as waiting, and `sluicectl spill`, `spill drain` and `spill purge` in table and
--json form with their error cases.

Usage: spill_gateway_test.py SLUICED SLUICECTL SPILL_DRAIN_TOOL
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER (tools/dev/test starts one for the
whole run) or starts a private one.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_util import (Failure, RawStomp, add_spill_user, connect_frame,  # noqa: E402
                          frame)
from rabbit_cluster import shared_cluster  # noqa: E402

DELIVERED = 300  # messages for the queue whose owner is up
WAITING = 40  # messages for the queue whose owner is down
START_TIMEOUT_S = 30
DRAIN_TIMEOUT_S = 60
PREFIX = "sluice-spillgw-%d-" % os.getpid()


def check(cond, message):
    if not cond:
        raise Failure(message)


def wait_until(what, timeout_s, probe, interval_s=0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval_s)
    raise Failure(f"timed out after {timeout_s} s waiting for {what}")


def dead_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Test:
    def __init__(self, sluiced, sluicectl, tool, cluster, work):
        self.sluiced, self.sluicectl, self.tool = sluiced, sluicectl, tool
        self.cluster, self.work = cluster, work
        self.socket_path = os.path.join(work, "admin.sock")
        self.state_dir = os.path.join(work, "state")
        self.spill_dir = os.path.join(self.state_dir, "spill")
        self.up_queue = PREFIX + "up"
        self.down_queue = PREFIX + "down"
        self.proc = None
        self.log_path = os.path.join(work, "sluiced.log")
        self.users_path = os.path.join(work, "spill-users")
        self.listen_port = dead_port()

    def ctl(self, *args, expect=0):
        p = subprocess.run([self.sluicectl, "--socket", self.socket_path, *args],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == expect,
              f"sluicectl {' '.join(args)} exited {p.returncode}, expected {expect}\n"
              f"stdout: {p.stdout}\nstderr: {p.stderr}")
        return p

    def ctl_json(self, *args):
        return json.loads(self.ctl("--json", *args).stdout)

    def write_config(self):
        node = self.cluster.nodes[0]
        config = f"""
[gateway]
id = "gw-spill-test"
state_dir = "{self.state_dir}"
[admin]
socket = "{self.socket_path}"
log_level = "info"
[listen]
address = "127.0.0.1:{self.listen_port}"
[stomp]
# The spill users here are the gateway's own, unknown to RabbitMQ: with login_check eager the
# up node would refuse them at CONNECT, before any spill session (doc/architecture.md "What happens to a
# session", the spill session).
login_check = "deferred"
[health]
probe = "tcp"
interval_ms = 300
timeout_ms = 200
rise = 1
fall = 1
[spill]
segment_bytes = 2097152
max_bytes = 67108864
users_file = "{self.users_path}"
[drain]
login = "{self.cluster.login}"
passcode_file = "{self.cluster.passcode_file}"
window = 16
rate_per_second = 1
backoff_base_ms = 50
backoff_max_ms = 500
[[nodes]]
name = "rabbit1"
address = "127.0.0.1:{node['stomp_port']}"
[[nodes]]
name = "dead"
address = "127.0.0.1:{dead_port()}"
[[pins]]
queue = "{self.up_queue}"
node = "rabbit1"
[[pins]]
queue = "{self.down_queue}"
node = "dead"
"""
        path = os.path.join(self.work, "sluice.toml")
        with open(path, "w") as f:
            f.write(config)
        return path

    def fill(self, queue, count):
        os.makedirs(self.state_dir, exist_ok=True)
        p = subprocess.run([self.tool, "fill", "--dir", self.spill_dir, "--queues", queue,
                            "--count", str(count)], capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"fill exited {p.returncode}: {p.stderr[-2000:]}")

    def start(self, config):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([self.sluiced, "--config", config], stdout=self.log,
                                     stderr=subprocess.STDOUT)

        def answering():
            check(self.proc.poll() is None,
                  f"sluiced exited {self.proc.returncode}:\n{open(self.log_path).read()}")
            p = subprocess.run([self.sluicectl, "--socket", self.socket_path, "status"],
                               capture_output=True, text=True, timeout=10)
            return p.returncode == 0
        wait_until("sluiced to answer", START_TIMEOUT_S, answering)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failure("sluiced did not stop within 30 s of SIGTERM")
            check(rc == 0, f"sluiced exited {rc} on SIGTERM")
        if self.proc:
            self.log.close()

    def spill_send(self, login, passcode):
        """CONNECT and a SEND with a receipt to the queue whose owner is down (a spill session):
        the frame that answers the SEND."""
        r = RawStomp(self.listen_port)
        try:
            r.send(connect_frame(login, passcode) +
                   frame("SEND", [("destination", "/queue/" + self.down_queue),
                                  ("receipt", "r1")], b"from " + login.encode()))
            f = r.read_frame()
            check(f is not None and f.command == "CONNECTED", f"expected CONNECTED, got {f}")
            return r.read_frame()
        finally:
            r.close()

    def silent_spill_client(self):
        """A spill session whose client negotiated heart-beats and then sends nothing is closed
        by the gateway within twice the client's interval."""
        r = RawStomp(self.listen_port)
        try:
            r.send(connect_frame("early", "early-pw", extra=()).replace(
                b"heart-beat:0,0", b"heart-beat:1000,1000") +
                frame("SEND", [("destination", "/queue/" + self.down_queue),
                               ("receipt", "hb1")], b"beating"))
            f = r.read_frame()
            check(f is not None and f.command == "CONNECTED"
                  and f.headers.get("heart-beat") == "1000,1000", f"expected CONNECTED, got {f}")
            f = r.read_frame()
            check(f is not None and f.command == "RECEIPT", f"expected the RECEIPT, got {f}")
            t0 = time.monotonic()  # the client's last byte went out before the RECEIPT came
            f = r.read_frame(timeout_s=HEARTBEAT_BOUND_S)
            took = time.monotonic() - t0
            check(f is not None and f.command == "ERROR"
                  and f.headers.get("message") == "heart-beat timeout",
                  f"a silent spill client got {f} after {took:.1f} s")
            r.wait_closed(5)
            check(1.5 <= took <= 2 * 1.0 + 0.5,
                  f"closed {took:.1f} s after its last byte (grace 2 s)")
        finally:
            r.close()
        key = 'sluice_spill_session_ends_total{reason="heartbeat_timeout"}'
        ends = self.ctl_json("metrics").get(key)
        check(ends == 1, f"{key} is {ends}")
        print(f"spill in sluiced: a silent client of a spill session closed {took:.1f} s after "
              f"its last byte (heart-beat 1000,1000)")

    LOGIN_FAMILIES = ("sluice_spill_login_verifications_total",
                      "sluice_spill_login_cache_hits_total",
                      'sluice_spill_logins_refused_total{reason="credentials"}',
                      'sluice_spill_logins_refused_total{reason="busy"}')

    def login_counts(self):
        m = self.ctl_json("metrics")
        check(all(k in m for k in self.LOGIN_FAMILIES), f"spill login metrics missing: {m}")
        check(m.get("sluice_spill_login_verifications_waiting") == 0,
              f"spill login checks left waiting: {m}")
        return [int(m[k]) for k in self.LOGIN_FAMILIES]

    def users_file_reload(self):
        """A spill user added to the users file while sluiced runs can spill after a reload."""
        before = self.login_counts()
        f = self.spill_send("late", "late-pw")
        check(f is not None and f.command == "ERROR"
              and f.headers.get("message") == "authentication failed",
              f"an unknown user's spill session got {f}")
        add_spill_user(self.sluicectl, self.users_path, "late", "late-pw",
                       [f"/:{self.down_queue}"], self.work)
        self.ctl("reload")
        check(re.search(r"event=users_file_reloaded path=\S+ users=2", open(self.log_path).read()),
              "no users_file_reloaded line with 2 users")
        f = self.spill_send("late", "late-pw")
        check(f is not None and f.command == "RECEIPT" and f.headers.get("receipt-id") == "r1",
              f"the user added before the reload got {f}")
        f = self.spill_send("early", "early-pw")
        check(f is not None and f.command == "RECEIPT", f"the first user after the reload got {f}")
        # A users file that does not load refuses the reload; the running one stays.
        with open(self.users_path, "a") as out:
            out.write("bogus line\n")
        p = self.ctl("reload", expect=1)
        check("spill.users_file:" in p.stderr and "running config stays" in p.stderr,
              f"reload with a broken users file: {p.stderr!r}")
        f = self.spill_send("late", "late-pw")
        check(f is not None and f.command == "RECEIPT", f"after a refused reload: {f}")
        # The unknown user's decoy check, then one check each for late and early (the reload
        # emptied the login cache), then late again from the cache.
        delta = [b - a for a, b in zip(before, self.login_counts())]
        check(delta == [3, 1, 1, 0], f"spill login metrics moved by {delta}, "
              f"not [3, 1, 1, 0] for {self.LOGIN_FAMILIES}")

    def spill_rows(self):
        out = self.ctl("spill").stdout
        lines = [l for l in out.splitlines() if l.strip()]
        check(lines and lines[0].startswith("spill log "), f"spill summary line: {out!r}")
        if len(lines) == 2 and lines[1] == "no backlog":
            return {}
        header = lines[1]
        check(header.split() == ["VHOST", "QUEUE", "MESSAGES", "BYTES", "OLDEST_S", "OWNER",
                                 "STATE"], f"spill header: {header!r}")
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        rows = {}
        for line in lines[2:]:
            cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [len(line)])]
            row = dict(zip(header.split(), cells))
            rows[row["QUEUE"]] = row
        return rows

    def run(self):
        self.cluster.delete_queue("/", self.up_queue)
        self.cluster.declare_queue("/", self.up_queue, 0)
        # Spilled by an earlier run of the gateway: sluiced recovers them at start.
        self.fill(self.up_queue, DELIVERED)
        self.fill(self.down_queue, WAITING)
        add_spill_user(self.sluicectl, self.users_path, "early", "early-pw",
                       [f"/:{self.down_queue}"], self.work)
        self.start(self.write_config())
        log = open(self.log_path).read()
        check(re.search(r"event=spill_recovered .*messages=%d" % (DELIVERED + WAITING), log),
              f"no spill_recovered line with {DELIVERED + WAITING} messages:\n{log}")

        # The drain starts at one message a second (after a burst of 64, the drainer's bucket);
        # raised live to no limit, the rest follows at once.
        def drained():
            return int(self.ctl_json("metrics").get("sluice_drain_delivered_total", 0))
        wait_until("the drain's first deliveries", DRAIN_TIMEOUT_S, lambda: drained() >= 1,
                   interval_s=0.2)
        time.sleep(2)
        paced = drained()
        check(paced <= 64 + 10, f"{paced} messages delivered at drain.rate_per_second = 1")
        check(self.ctl_json("get", "drain.rate_per_second")["value"] == "1", "rate at start")
        p = self.ctl("set", "drain.rate_per_second", "0")
        check(p.stdout == "drain.rate_per_second set to 0\n", f"set said {p.stdout!r}")
        p = self.ctl("set", "spill.queue_messages_max", "0", expect=1)
        check("spill.queue_messages_max: must be a whole number from 1 to" in p.stderr,
              f"set spill.queue_messages_max 0: {p.stderr!r}")
        # spill.max_bytes: the spill log's cap, live; under two segments (2 x 2 MiB) refused.
        check(self.ctl_json("spill")["max_bytes"] == 64 << 20, "spill.max_bytes at start")
        p = self.ctl("set", "spill.max_bytes", str(4 << 20))
        check(p.stdout == f"spill.max_bytes set to {4 << 20}\n", f"set said {p.stdout!r}")
        p = self.ctl("set", "spill.max_bytes", str((4 << 20) - 1), expect=1)
        check("spill.max_bytes must be at least two segments" in p.stderr,
              f"set spill.max_bytes under two segments: {p.stderr!r}")
        check(self.ctl_json("spill")["max_bytes"] == 4 << 20
              and float(self.ctl_json("metrics").get("sluice_spill_max_bytes", 0)) == 4 << 20,
              "spill.max_bytes after set")
        self.ctl("set", "spill.max_bytes", str(64 << 20))

        # The owner that is up gets its backlog; the other queue waits.
        def delivered():
            info = self.cluster.queue("/", self.up_queue) or {}
            return info.get("messages") == DELIVERED and self.spill_rows().get(self.up_queue) is None
        wait_until(f"{DELIVERED} messages in RabbitMQ queue {self.up_queue}", DRAIN_TIMEOUT_S,
                   delivered, interval_s=0.5)
        msgs = self.cluster.api("POST", f"/api/queues/%2F/{self.up_queue}/get",
                                {"count": DELIVERED + 10, "ackmode": "ack_requeue_false",
                                 "encoding": "auto", "truncate": 10000})
        bodies = [m["payload"] for m in msgs]
        check(bodies == [f"{self.up_queue}-{i}" for i in range(DELIVERED)],
              f"bodies out of order or missing: {bodies[:5]}... ({len(bodies)})")
        ids = {m["properties"]["headers"]["sluice-message-id"] for m in msgs}
        check(len(ids) == DELIVERED and all(i.startswith("gw-spill-test-") for i in ids),
              f"message ids: {sorted(ids)[:3]}")

        rows = wait_until("the waiting queue in sluicectl spill", 10,
                          lambda: self.spill_rows().get(self.down_queue))
        check(rows["MESSAGES"] == str(WAITING) and rows["OWNER"] == "dead"
              and rows["STATE"] == "waiting: owner down", f"spill row: {rows}")
        j = self.ctl_json("spill")
        check(j["messages"] == WAITING and j["dir"] == self.spill_dir
              and [q["queue"] for q in j["queues"]] == [self.down_queue]
              and j["queues"][0]["oldest_age_s"] >= 0, f"spill --json: {j}")
        status = self.ctl_json("status")
        check(status["queues_with_backlog"] == 1, f"status: {status}")
        q = self.ctl_json("queue", "show", "/", self.down_queue)
        check(q["backlog"] is True, f"queue show: {q}")
        q = self.ctl_json("queue", "show", "/", self.up_queue)
        check(q["backlog"] is False, f"queue show: {q}")

        # drain: retry now; errors for a queue without backlog.
        p = self.ctl("spill", "drain", self.down_queue)
        check(p.stdout == f'queue "{self.down_queue}" in vhost "/": drain requested\n',
              f"spill drain said {p.stdout!r}")
        check(self.ctl_json("spill", "drain", self.down_queue)["drain"] == "requested", "json")
        p = self.ctl("spill", "drain", "no-such-queue", expect=1)
        check('queue "no-such-queue" in vhost "/" has no spill backlog' in p.stderr,
              f"spill drain error: {p.stderr!r}")
        p = self.ctl("spill", "drain", self.down_queue, "--vhost", "other", expect=1)
        check("has no spill backlog" in p.stderr, f"spill drain other vhost: {p.stderr!r}")
        p = self.ctl("spill", "bogus", expect=2)

        # purge: refused without --yes, then logged and gone.
        p = self.ctl("spill", "purge", self.down_queue, expect=2)
        check("add --yes" in p.stderr, f"purge without --yes: {p.stderr!r}")
        check(self.spill_rows().get(self.down_queue) is not None, "purged without --yes")
        p = self.ctl("spill", "purge", self.down_queue, "--yes")
        check(p.stdout == f'queue "{self.down_queue}" in vhost "/": {WAITING} spilled messages '
              f"dropped\n", f"spill purge said {p.stdout!r}")
        p = self.ctl("spill", "purge", self.down_queue, "--yes", expect=1)
        check("has no spill backlog" in p.stderr, f"second purge: {p.stderr!r}")
        wait_until("an empty spill", 10, lambda: self.spill_rows() == {})
        check(self.ctl("spill").stdout.endswith("no backlog\n"), "spill after purge")
        wait_until("no queue with backlog", 10,
                   lambda: self.ctl_json("status")["queues_with_backlog"] == 0)
        log = open(self.log_path).read()
        check(re.search(r"level=warn event=spill_purged vhost=/ queue=%s messages=%d"
                        % (re.escape(self.down_queue), WAITING), log), f"no purge line:\n{log}")

        m = self.ctl_json("metrics")
        check(m.get("sluice_drain_delivered_total") == DELIVERED
              and m.get("sluice_spill_backlog_messages") == 0
              and 'sluice_spill_refusals_total{reason="spill_full"}' in m
              and "sluice_spill_batches_direct_total" in m, f"metrics: {m}")
        self.users_file_reload()
        self.silent_spill_client()
        self.stop()
        self.cluster.delete_queue("/", self.up_queue)
        print(f"spill in sluiced: {DELIVERED} recovered messages delivered to RabbitMQ in order "
              f"({paced} while paced at one a second, the rest once the rate was raised live), "
              f"{WAITING} waiting for a dead owner shown, drained on request and purged")


HEARTBEAT_BOUND_S = 10  # a silent client must be closed by then


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="sluice-spillgw-")
    test = None
    try:
        cluster = shared_cluster()
        test = Test(sys.argv[1], sys.argv[2], sys.argv[3], cluster, work)
        test.run()
    except Failure as e:
        print(f"FAILED: {e}", file=sys.stderr)
        if test and os.path.exists(test.log_path):
            print("sluiced log (tail):\n" + "".join(open(test.log_path).readlines()[-30:]),
                  file=sys.stderr)
        return 1
    finally:
        if test:
            try:
                test.stop()
            except Failure as e:
                print(f"FAILED: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    print("spill in sluiced: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
