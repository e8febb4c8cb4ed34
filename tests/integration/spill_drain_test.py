#!/usr/bin/python3
"""The drainer against a real RabbitMQ node: a spilled backlog of 10,000 messages across five
queues is delivered exactly once and in per-queue order; and, with the owner stopped
(`rabbitmqctl stop_app`) and started again in the middle of a drain, nothing is lost and every
duplicate carries the same sluice-message-id as its first copy.

Usage: spill_drain_test.py SPILL_DRAIN_TOOL
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER (tools/dev/test starts one for the
whole run) or starts a private one.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rabbit_cluster import shared_cluster  # noqa: E402

QUEUES = 5
PER_QUEUE = 2000  # 10,000 messages in all
NODE = 0  # the owner: sluice1
DRAIN_TIMEOUT_S = 150
STOP_AFTER_DELIVERED = 2000
# The drain with a restart is paced (the drainer's rate limit) so that the owner stops while
# it runs: stop_app takes about 6 s, unpaced the whole drain takes about 1.5 s.
RESTART_RATE = 800
PREFIX = "sluice-drain-%d-" % os.getpid()


def run(cmd, timeout_s):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout}\n"
                             f"stderr:\n{r.stderr[-4000:]}")
    return r.stdout


def fetch_all(cluster, queue, expected_at_least):
    """Every message in the queue, taken off it (the management API's get, in queue order)."""
    out = []
    deadline = time.monotonic() + 60
    while True:
        got = cluster.api("POST", f"/api/queues/%2F/{queue}/get",
                          {"count": 5000, "ackmode": "ack_requeue_false", "encoding": "auto",
                           "truncate": 100000})
        out.extend(got)
        if not got:
            if len(out) >= expected_at_least or time.monotonic() > deadline:
                return out
            time.sleep(0.2)  # the last confirms may still be on their way into the queue


def check(cluster, queues, label, allow_duplicates):
    duplicates = 0
    for q in queues:
        msgs = fetch_all(cluster, q, PER_QUEUE)
        id_to_body = {}
        first_order = []
        for m in msgs:
            headers = (m.get("properties") or {}).get("headers") or {}
            mid = headers.get("sluice-message-id")
            body = m["payload"]
            assert mid, f"{label}: {q}: a message without sluice-message-id: {m}"
            if mid in id_to_body:
                assert id_to_body[mid] == body, \
                    f"{label}: {q}: id {mid} carried {id_to_body[mid]!r} and {body!r}"
                duplicates += 1
                continue
            id_to_body[mid] = body
            first_order.append(body)
        want = [f"{q}-{i}" for i in range(PER_QUEUE)]
        assert first_order == want, (
            f"{label}: {q}: {len(first_order)} distinct messages; first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(first_order, want)) if a != b), None)}")
    if not allow_duplicates:
        assert duplicates == 0, f"{label}: {duplicates} duplicates without any fault"
    return duplicates


def declare(cluster, names):
    for q in names:
        cluster.delete_queue("/", q)
        cluster.declare_queue("/", q, NODE)


def fill(tool, spill_dir, names):
    out = run([tool, "fill", "--dir", spill_dir, "--queues", ",".join(names),
               "--count", str(PER_QUEUE)], 120)
    assert json.loads(out.strip().splitlines()[-1])["appended"] == QUEUES * PER_QUEUE, out


def drain_cmd(tool, cluster, spill_dir, gateway_id, rate=0):
    node = cluster.nodes[NODE]
    return [tool, "drain", "--dir", spill_dir, "--host", "127.0.0.1",
            "--port", str(node["stomp_port"]), "--login", cluster.login,
            "--passcode-file", cluster.passcode_file, "--gateway-id", gateway_id,
            "--window", "64", "--backoff-max-ms", "1000", "--rate", str(rate),
            "--timeout-s", str(DRAIN_TIMEOUT_S)]


def no_fault(tool, cluster, work):
    names = [f"{PREFIX}a{i}" for i in range(QUEUES)]
    declare(cluster, names)
    spill_dir = os.path.join(work, "spill-a")
    fill(tool, spill_dir, names)
    t0 = time.monotonic()
    out = run(drain_cmd(tool, cluster, spill_dir, "gwa"), DRAIN_TIMEOUT_S + 30)
    took = time.monotonic() - t0
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["backlog"] == 0 and stats["delivered"] == QUEUES * PER_QUEUE, stats
    assert stats["resent"] == 0, stats
    check(cluster, names, "no fault", allow_duplicates=False)
    print(f"no fault: {QUEUES * PER_QUEUE} messages delivered once, in order per queue, "
          f"in {took:.1f} s ({stats})")
    # Fully delivered: the spill directory holds no message any more.
    for q in names:
        cluster.delete_queue("/", q)


def owner_restart(tool, cluster, work):
    names = [f"{PREFIX}b{i}" for i in range(QUEUES)]
    declare(cluster, names)
    spill_dir = os.path.join(work, "spill-b")
    fill(tool, spill_dir, names)
    proc = subprocess.Popen(drain_cmd(tool, cluster, spill_dir, "gwb", RESTART_RATE),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stopped_at = None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if stopped_at is None and line.startswith("progress "):
                delivered = int(line.split()[1].split("=")[1])
                if delivered >= STOP_AFTER_DELIVERED:
                    stopped_at = delivered
                    cluster.stop_app(NODE)
                    time.sleep(1.0)
                    cluster.start_app(NODE)
        rc = proc.wait(timeout=DRAIN_TIMEOUT_S + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert rc == 0, f"drain exited {rc}\n{''.join(lines[-5:])}\n{err[-4000:]}"
    assert stopped_at is not None and stopped_at < QUEUES * PER_QUEUE, \
        f"the drain ended before the owner could be stopped ({lines[-3:]})"
    stats = json.loads(lines[-1])
    assert stats["backlog"] == 0, stats
    assert stats["link_failures"] + stats["connect_failures"] >= 1, stats
    duplicates = check(cluster, names, "owner restarted", allow_duplicates=True)
    print(f"owner stopped after {stopped_at} deliveries and started again: every message "
          f"delivered, {duplicates} duplicates (same sluice-message-id), order kept ({stats})")
    for q in names:
        cluster.delete_queue("/", q)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    work = tempfile.mkdtemp(prefix="sluice-drain-")
    try:
        cluster = shared_cluster()
        no_fault(tool, cluster, work)
        owner_restart(tool, cluster, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("spill drain against RabbitMQ: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
