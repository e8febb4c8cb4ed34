#!/usr/bin/python3
"""sluice-load against one real RabbitMQ node: 50 producers and 50 consumers on 10 queues for a
bounded run (400 messages per producer, at most 8 s of producing) report zero lost, duplicated
and out of order, and the counts agree with RabbitMQ's management API.

Which RabbitMQ counts, and why they are exact: every SEND carries a receipt, and RabbitMQ
answers a SEND's receipt only once the message is confirmed, i.e. enqueued. So, per queue,
`message_stats.publish` (messages routed into the queue) must equal sluice-load's `sent` and
`acknowledged` for that queue (no SEND goes unconfirmed). Consumers use ack mode `client` and
end with DISCONNECT and its receipt, which RabbitMQ answers after the earlier ACKs; so
`message_stats.ack` and `message_stats.deliver_get` must equal `received` (no redeliveries:
nothing was requeued) and the queue is left empty (`messages` 0). Statistics are emitted every
second (collect_statistics_interval = 1000 in rabbit_cluster.py), so they are polled until they
settle, for at most STATS_TIMEOUT_S.

Usage: load_rabbit_test.py SLUICE_LOAD
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER or starts a private one.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rabbit_cluster import shared_cluster  # noqa: E402

QUEUES = 10
PRODUCERS = 50
CONSUMERS = 50
PER_PRODUCER = 400
DURATION_S = 8
MIN_SENT = 1000  # a run that sent less proves little
RUN_TIMEOUT_S = 45
STATS_TIMEOUT_S = 20
NODE = 0
PREFIX = "sluice-load-%d-" % os.getpid()


def queue_counts(cluster, name):
    info = cluster.queue("/", name) or {}
    stats = info.get("message_stats") or {}
    return {"publish": stats.get("publish", 0), "deliver_get": stats.get("deliver_get", 0),
            "ack": stats.get("ack", 0), "redeliver": stats.get("redeliver", 0),
            "messages": info.get("messages", -1)}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    cluster = shared_cluster()
    names = [f"{PREFIX}{i}" for i in range(QUEUES)]
    try:
        for q in names:
            cluster.delete_queue("/", q)
            cluster.declare_queue("/", q, NODE)
        cmd = [tool, "--target", f"127.0.0.1:{cluster.nodes[NODE]['stomp_port']}",
               "--login", cluster.login, "--passcode-file", cluster.passcode_file,
               "--connections", str(PRODUCERS), "--producers-per-connection", "1",
               "--consumer-connections", str(CONSUMERS // 5), "--consumers-per-connection", "5",
               "--queues", str(QUEUES), "--queue-pattern", PREFIX + "{i}",
               "--destination-prefix", "/amq/queue/", "--spread", "fixed",
               "--size", "uniform:16-1K", "--count", str(PER_PRODUCER),
               "--duration", str(DURATION_S), "--window", "16", "--ack", "client",
               "--prefetch", "64", "--drain-timeout", "15", "--json"]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        took = time.monotonic() - t0
        assert r.returncode == 0, f"sluice-load exited {r.returncode}\n{r.stdout}\n{r.stderr}"
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["result"] == "ok" and res["checked"], res
        for key in ("lost", "lost_acknowledged", "duplicated", "out_of_order", "unconfirmed",
                    "errors", "foreign"):
            assert res[key] == 0, f"{key} = {res[key]}: {res}"
        # Count-bound normally (about 3 s); on a loaded machine the duration ends it first.
        assert MIN_SENT <= res["sent"] <= PRODUCERS * PER_PRODUCER, res
        assert res["acknowledged"] == res["sent"] == res["received"], res
        # Every queue: sluice-load's counts against RabbitMQ's, once the statistics settle.
        mine = {q["name"]: q for q in res["queues"]}
        deadline = time.monotonic() + STATS_TIMEOUT_S
        while True:
            theirs = {q: queue_counts(cluster, q) for q in names}
            wrong = [(q, mine[q], theirs[q]) for q in names
                     if not (theirs[q]["publish"] == mine[q]["sent"] == mine[q]["acknowledged"]
                             and theirs[q]["deliver_get"] == mine[q]["received"]
                             and theirs[q]["ack"] == mine[q]["received"]
                             and theirs[q]["redeliver"] == 0 and theirs[q]["messages"] == 0)]
            if not wrong:
                break
            assert time.monotonic() < deadline, \
                f"RabbitMQ's counts differ after {STATS_TIMEOUT_S} s: {wrong[:3]}"
            time.sleep(0.5)
        print(f"sluice-load: {res['sent']} messages over {QUEUES} queues, {PRODUCERS} producers "
              f"and {CONSUMERS} consumers, in {took:.1f} s ({res['throughput_msg_s']:.0f} msg/s, "
              f"receipt p99 {res['latency_us']['receipt']['p99']:.0f} us): none lost, "
              f"duplicated or out of order; RabbitMQ's publish, deliver_get and ack counts match "
              f"per queue")
    finally:
        for q in names:
            cluster.delete_queue("/", q)
    print("load against RabbitMQ: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
