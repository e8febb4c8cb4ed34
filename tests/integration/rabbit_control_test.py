#!/usr/bin/python3
"""sluiced against a real two-node RabbitMQ cluster: queues learned from the management API
with the right Sluice node, and health through STOMP probes when a node stops and starts.

Usage: rabbit_control_test.py SLUICED
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER (tools/dev/test starts one for the
whole run) or starts a private one.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rabbit_cluster import shared_cluster  # noqa: E402

INTERVAL_MS = 500
TIMEOUT_MS = 300
RISE = 2
FALL = 2
FEED_INTERVAL_MS = 500
# What this test's own polling adds to a measured time: it looks every POLL_S.
POLL_S = 0.02
SLACK_S = 0.25
PREFIX = "sluice-it-%d-" % os.getpid()


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Failed(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failed(message)
    print("ok: " + message, flush=True)


def api(sock, method, path, body=None):
    conn = UnixHTTPConnection(sock)
    try:
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        text = r.read().decode()
        return r.status, (json.loads(text) if text and path != "/metrics" else text)
    finally:
        conn.close()


def port_answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, pred, limit_s):
    end = time.monotonic() + limit_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise Failed("timed out after %.1f s waiting for %s" % (limit_s, what))
        time.sleep(POLL_S)


def node_state(sock, name):
    status, n = api(sock, "GET", "/v1/nodes/" + name)
    if status != 200:
        raise Failed("GET /v1/nodes/%s answered %d: %s" % (name, status, n))
    return n


def learned(sock):
    status, body = api(sock, "GET", "/v1/queues?source=learned")
    if status != 200:
        raise Failed("GET /v1/queues answered %d" % status)
    return {(q["vhost"], q["queue"]): q["node"] for q in body["queues"]}


def main():
    if len(sys.argv) != 2:
        print("usage: rabbit_control_test.py SLUICED", file=sys.stderr)
        return 2
    sluiced = sys.argv[1]
    cluster = shared_cluster(nodes=2)
    work = tempfile.mkdtemp(prefix="sluice-rabbit-it-")
    log_path = os.path.join(work, "sluiced.log")
    proc = None
    queues = []
    try:
        nodes = cluster.nodes
        classic1, classic2, quorum = PREFIX + "c1", PREFIX + "c2", PREFIX + "q1"
        cluster.declare_queue("/", classic1, 0)
        queues.append(classic1)
        cluster.declare_queue("/", classic2, 1)
        queues.append(classic2)
        cluster.declare_queue("/", quorum, 1, type="quorum")
        queues.append(quorum)
        quorum_home = cluster.queue_home(cluster.queue("/", quorum))
        names = {nodes[0]["name"]: "r1", nodes[1]["name"]: "r2"}
        check(quorum_home in names, "the quorum queue's leader is a cluster node (%s)" % quorum_home)

        sock = os.path.join(work, "admin.sock")
        config = os.path.join(work, "sluice.toml")
        with open(config, "w") as f:
            f.write("""
[gateway]
state_dir = "{work}/state"
[admin]
socket = "{sock}"
log_level = "debug"
[listen]
address = "127.0.0.1:{listen_port}"
[health]
probe = "stomp"
interval_ms = {interval}
timeout_ms = {timeout}
rise = {rise}
fall = {fall}
login = "{login}"
passcode_file = "{passcode}"
[[nodes]]
name = "r1"
address = "127.0.0.1:{stomp1}"
broker_node = "{name1}"
[[nodes]]
name = "r2"
address = "127.0.0.1:{stomp2}"
broker_node = "{name2}"
[feed.rabbitmq]
enabled = true
urls = ["{url1}", "{url2}"]
login = "{login}"
passcode_file = "{passcode}"
interval_ms = {feed_interval}
timeout_ms = 400
""".format(work=work, sock=sock, listen_port=free_port(), interval=INTERVAL_MS, timeout=TIMEOUT_MS, rise=RISE,
           fall=FALL, login=cluster.login, passcode=cluster.passcode_file,
           stomp1=nodes[0]["stomp_port"], stomp2=nodes[1]["stomp_port"],
           name1=nodes[0]["name"], name2=nodes[1]["name"], url1=cluster.mgmt_url(0),
           url2=cluster.mgmt_url(1), feed_interval=FEED_INTERVAL_MS))
        log = open(log_path, "w")
        proc = subprocess.Popen([sluiced, "--config", config], stdout=log, stderr=log)
        wait_for("the admin socket", lambda: os.path.exists(sock) or proc.poll() is not None, 10)
        check(proc.poll() is None, "sluiced started")

        # Learned owners: each queue on the node RabbitMQ reports.
        expect = {("/", classic1): "r1", ("/", classic2): "r2", ("/", quorum): names[quorum_home]}
        got = wait_for("the feed to report the three queues",
                       lambda: (lambda l: l if all(k in l for k in expect) else None)(learned(sock)),
                       15)
        for k, node in expect.items():
            check(got[k] == node, "queue %s learned on %s (RabbitMQ node %s)" %
                  (k[1], node, [n for n, s in names.items() if s == node][0]))
        status, q = api(sock, "GET", "/v1/queue?vhost=%2F&queue=" + classic2)
        check(status == 200 and q["source"] == "learned" and q["learned"] == "r2",
              "queue show reports source learned for " + classic2)

        # Both nodes up through STOMP handshakes.
        for name in ("r1", "r2"):
            wait_for(name + " up with probes", lambda n=name: node_state(sock, n)["probes_ok"] >= RISE, 10)
            check(node_state(sock, name)["health"] == "up", name + " is up after STOMP probes")

        # stop_app: the STOMP listener closes; r2 must go down within fall x interval + timeout.
        # stop_app takes seconds (the management plugin's shutdown) but closes the STOMP listener
        # first: the clock starts when that port refuses connections.
        bound_s = (FALL * INTERVAL_MS + TIMEOUT_MS) / 1000.0
        stopper = threading.Thread(target=cluster.stop_app, args=(1,))
        stopper.start()
        t0 = wait_for("r2's STOMP port to refuse",
                      lambda: None if port_answers(nodes[1]["stomp_port"]) else time.monotonic(), 60)
        wait_for("r2 down", lambda: node_state(sock, "r2")["health"] == "down", 30)
        down_s = time.monotonic() - t0
        stopper.join(60)
        check(not stopper.is_alive(), "rabbitmqctl stop_app finished")
        print("measured: r2 down %.3f s after its STOMP port closed (bound %.3f s = %d x %d ms + "
              "%d ms)" % (down_s, bound_s, FALL, INTERVAL_MS, TIMEOUT_MS), flush=True)
        check(down_s <= bound_s + SLACK_S,
              "r2 went down within fall x interval + timeout (%.3f s <= %.3f s + %.2f s polling)"
              % (down_s, bound_s, SLACK_S))
        n = node_state(sock, "r2")
        check(n["last_probe_error"] != "", "the failed probe says why: " + n["last_probe_error"])
        check(node_state(sock, "r1")["health"] == "up", "r1 stays up")
        status, metrics = api(sock, "GET", "/metrics")
        check('sluice_node_up{node="r2"} 0' in metrics, "metrics show r2 down")

        # The learned state stays while a broker is partly away.
        check(learned(sock).get(("/", classic1)) == "r1", "learned owners stay while r2 is down")

        # start_app: back up after `rise` successful probes.
        ok_before = node_state(sock, "r2")["probes_ok"]
        cluster.start_app(1)
        t1 = time.monotonic()
        wait_for("r2 up", lambda: node_state(sock, "r2")["health"] == "up", 30)
        up_s = time.monotonic() - t1
        n = node_state(sock, "r2")
        print("measured: r2 up %.3f s after start_app returned, %d successful probes"
              % (up_s, n["probes_ok"] - ok_before), flush=True)
        check(n["probes_ok"] - ok_before >= RISE, "r2 came back up after %d successful probes" % RISE)
        check(up_s <= (RISE * INTERVAL_MS + TIMEOUT_MS) / 1000.0 + SLACK_S,
              "r2 came up within rise x interval + timeout")

        # A deleted queue is forgotten at the next poll.
        cluster.delete_queue("/", classic1)
        queues.remove(classic1)
        wait_for("the feed to forget " + classic1,
                 lambda: ("/", classic1) not in learned(sock), 10)
        check(True, "a queue deleted in RabbitMQ is forgotten")
        status, st = api(sock, "GET", "/v1/status")
        check(st["feed"]["polls"] > 0 and st["feed"]["last_error"] == "",
              "feed polls counted, no error (%d polls)" % st["feed"]["polls"])

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=15)
        check(rc == 0, "sluiced stops cleanly on SIGTERM")
        proc = None
        print("PASS rabbit_control_test", flush=True)
        return 0
    except Failed as e:
        print("FAIL: %s" % e, flush=True)
        if os.path.exists(log_path):
            print("---- sluiced log (tail) ----")
            with open(log_path) as f:
                print("".join(f.readlines()[-60:]))
        return 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for q in queues:
            try:
                cluster.delete_queue("/", q)
            except Exception as e:  # a node may be stopped if the test failed midway
                print("cleanup: %s" % e)
        try:
            cluster.start_app(1)  # leave the shared cluster as found
        except Exception as e:
            print("cleanup: %s" % e)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
