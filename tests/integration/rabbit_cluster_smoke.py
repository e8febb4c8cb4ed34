#!/usr/bin/python3
"""Smoke test of rabbit_cluster.py against real RabbitMQ nodes: clustering, queue placement,
STOMP through node 2, stop_app/start_app, and (for a private cluster) a clean teardown.

Run: /usr/bin/python3 tests/integration/rabbit_cluster_smoke.py
With SLUICE_RABBIT_CLUSTER=FILE it attaches to a cluster started by `rabbit_cluster.py start`.
Exit status 0 on success, 1 with a FAIL line naming the failed check otherwise.
"""

import contextlib
import os
import signal
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rabbit_cluster  # noqa: E402

try:
    import stomp  # Debian python3-stomp; this script must run under /usr/bin/python3
except ImportError:
    print("FAIL: module stomp not found: install python3-stomp and run with /usr/bin/python3",
          file=sys.stderr)
    sys.exit(1)

VHOST = "/"
MESSAGE_WAIT_S = 10
STOMP_CONNECT_TIMEOUT_S = 10
# Whole run, boot included: stomp.py's own waits are not all bounded, so SIGALRM bounds them.
SMOKE_TIMEOUT_S = 400


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def step(name, t0):
    print(f"ok   {name} ({time.monotonic() - t0:.1f} s)", flush=True)


class _Inbox(stomp.ConnectionListener):
    def __init__(self):
        self.bodies = []
        self.errors = []
        self.arrived = threading.Event()
        self.connected = threading.Event()
        self.disconnected = threading.Event()

    def on_connected(self, frame):
        self.connected.set()

    def on_disconnected(self):
        self.disconnected.set()

    def on_message(self, frame):
        self.bodies.append(frame.body)
        self.arrived.set()

    def on_error(self, frame):
        self.errors.append(frame.headers.get("message", frame.body))
        self.arrived.set()


def stomp_connect(port, inbox=None, login="guest", passcode="guest"):
    """A STOMP 1.2 connection that got CONNECTED within STOMP_CONNECT_TIMEOUT_S."""
    inbox = inbox or _Inbox()
    # vhost="/" matters: stomp.py sends the host name as `host`, which RabbitMQ takes as vhost.
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), vhost=VHOST,
                              timeout=STOMP_CONNECT_TIMEOUT_S)
    conn.set_listener("inbox", inbox)
    conn.connect(login, passcode, wait=False)
    deadline = time.monotonic() + STOMP_CONNECT_TIMEOUT_S
    try:
        while not inbox.connected.is_set():
            check(not inbox.errors, f"STOMP CONNECT as {login} to port {port}: ERROR "
                                    f"{inbox.errors}")
            check(not inbox.disconnected.is_set(),
                  f"STOMP CONNECT as {login} to port {port}: connection closed")
            check(time.monotonic() < deadline, f"STOMP CONNECT as {login} to port {port}: no "
                                               f"CONNECTED in {STOMP_CONNECT_TIMEOUT_S} s")
            time.sleep(0.05)
    except CheckFailed:
        with contextlib.suppress(Exception):
            conn.disconnect()
        raise
    return conn


def stomp_round_trip(port, queue, body):
    """Subscribes to and sends one message to an existing queue through one STOMP port."""
    inbox = _Inbox()
    conn = stomp_connect(port, inbox)
    try:
        # /amq/queue/NAME uses the queue as declared (no re-declare with other arguments).
        conn.subscribe(f"/amq/queue/{queue}", id="smoke", ack="auto")
        conn.send(f"/amq/queue/{queue}", body, receipt=f"sent-{queue}")
        got = inbox.arrived.wait(MESSAGE_WAIT_S)
    finally:
        conn.disconnect()
    check(not inbox.errors, f"STOMP ERROR frame from port {port}: {inbox.errors}")
    check(got, f"no message from /amq/queue/{queue} via port {port} in {MESSAGE_WAIT_S} s")
    check(inbox.bodies == [body], f"via port {port} got {inbox.bodies!r}, sent {body!r}")


def connect_refused(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def run(cluster, queue_names):
    nodes = cluster.nodes
    check(len(nodes) >= 2, f"need 2 nodes, the cluster has {len(nodes)}")
    names = [n["name"] for n in nodes]

    t0 = time.monotonic()
    running = cluster.running_nodes()
    check(set(names[:2]) <= set(running),
          f"cluster_status running nodes {running} lack one of {names[:2]}")
    step(f"cluster_status runs {', '.join(running)}", t0)

    t0 = time.monotonic()
    for i in (0, 1):
        name = queue_names[i]
        info = cluster.declare_queue(VHOST, name, i)
        check(info.get("node") == names[i],
              f"queue {name} has node {info.get('node')}, wanted {names[i]}")
    listed = {q["name"]: q.get("node") for q in cluster.queues(VHOST)}
    for i in (0, 1):
        check(listed.get(queue_names[i]) == names[i],
              f"/api/queues lists {queue_names[i]} on {listed.get(queue_names[i])}")
    step(f"classic queues on {names[0]} and {names[1]} (node field checked)", t0)

    t0 = time.monotonic()
    port2 = nodes[1]["stomp_port"]
    for i in (1, 0):  # a local queue, then one that lives on the other node
        stomp_round_trip(port2, queue_names[i], f"smoke {queue_names[i]} {time.time()}")
    step(f"STOMP send+receive through {names[1]} port {port2} (queues on both nodes)", t0)

    t0 = time.monotonic()
    cluster.stop_app(1)
    check(connect_refused(port2), f"STOMP port {port2} of {names[1]} accepts after stop_app")
    running = cluster.running_nodes()
    check(names[1] not in running, f"{names[1]} still in running nodes {running} after stop_app")
    step(f"stop_app({names[1]}): STOMP port {port2} refuses connections", t0)

    t0 = time.monotonic()
    cluster.start_app(1)
    # As the sluice user this time: its passcode file is what Sluice's configs will name.
    stomp_connect(port2, login=cluster.login, passcode=cluster.passcode).disconnect()
    step(f"start_app({names[1]}): STOMP CONNECT as {cluster.login} on port {port2} works "
         f"again", t0)

    t0 = time.monotonic()
    for name in queue_names:
        check(cluster.delete_queue(VHOST, name, missing_ok=False), f"queue {name} was gone")
    left = {q["name"] for q in cluster.queues(VHOST)} & set(queue_names)
    check(not left, f"queues still listed after delete: {sorted(left)}")
    queue_names.clear()
    step("queues deleted", t0)


def _on_alarm(signum, frame):
    raise CheckFailed(f"the smoke test did not finish in {SMOKE_TIMEOUT_S} s")


def main():
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(SMOKE_TIMEOUT_S)
    attached = bool(os.environ.get(rabbit_cluster.SHARED_STATE_ENV))
    t0 = time.monotonic()
    try:
        cluster = rabbit_cluster.shared_cluster(nodes=2)
    except (rabbit_cluster.ClusterError, CheckFailed) as e:
        print(f"FAIL: could not get a cluster: {e}", file=sys.stderr)
        return 1
    phases = ", ".join(f"{k} {v} s" for k, v in cluster.phase_s.items())
    if attached:
        print(f"attached in {time.monotonic() - t0:.1f} s; the cluster booted in "
              f"{cluster.boot_s:.1f} s when it was started ({phases})")
    else:
        print(f"cluster booted in {cluster.boot_s:.1f} s ({phases}); each node answered after "
              f"{cluster.node_boot_s} s")
    for line in cluster.describe():
        print("     " + line)
    for i, n in enumerate(cluster.nodes):
        rss_kb = cluster.node_rss_kb(i)
        print(f"     {n['name']} resident memory "
              + (f"{rss_kb // 1024} MiB" if rss_kb else "unknown (not our process?)"))

    tag = f"{os.getpid()}-{int(time.time())}"
    queue_names = [f"smoke-{tag}-n1", f"smoke-{tag}-n2"]
    status = 0
    try:
        run(cluster, queue_names)
    except (CheckFailed, rabbit_cluster.ClusterError, stomp.exception.StompException,
            OSError) as e:
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        status = 1
    finally:
        for name in queue_names:  # only those a failure left behind
            try:
                cluster.delete_queue(VHOST, name)
            except rabbit_cluster.ClusterError as e:
                print(f"cleanup: could not delete queue {name}: {e}", file=sys.stderr)

    if cluster.owned:
        t0 = time.monotonic()
        problems = cluster.stop()
        left = cluster.leftover_pids()
        if problems or left:
            print(f"FAIL: teardown: problems {problems}, processes still alive {left}",
                  file=sys.stderr)
            status = 1
        else:
            print(f"ok   teardown: nodes and epmd gone ({time.monotonic() - t0:.1f} s)")
    print("PASS" if status == 0 else "FAILED")
    return status


if __name__ == "__main__":
    sys.exit(main())
