#!/usr/bin/python3
"""The main job, shown on the local cluster (tools/dev/run calls this once sluiced is up).

1. sluice-load through sluiced to 8 queues: Sluice places them over both nodes (`sluicectl
   queues`), and the management API shows each queue on the node Sluice chose.
2. One node is stopped; producers keep sending through sluiced to queues it owns: the gateway
   spills, acknowledging each message once it is durable (`sluicectl spill`).
3. The node is restarted; the drainer delivers the backlog; the management API counts every
   acknowledged message in its queue: nothing lost.
Exits non-zero when any step does not hold.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import rabbit_cluster  # noqa: E402

QUEUES = 8
SPILL_QUEUES = 4
SPILL_MESSAGES = 500  # per producer
STEP_TIMEOUT_S = 120


def say(text):
    print(f"\n== {text}", flush=True)


def fail(text):
    print(f"demo: FAILED: {text}", file=sys.stderr, flush=True)
    sys.exit(1)


class Demo:
    def __init__(self, root, run_dir, state, target):
        self.root = root
        self.sluicectl = os.path.join(root, "build/tools/sluicectl/sluicectl")
        self.load = os.path.join(root, "build/tools/sluice-load/sluice-load")
        self.socket = os.path.join(run_dir, "admin.sock")
        self.target = target
        self.cluster = rabbit_cluster.RabbitCluster.attach(state, verbose=False)

    def ctl(self, *args, show=True):
        p = subprocess.run([self.sluicectl, "--socket", self.socket, *args], text=True,
                           capture_output=True, timeout=30)
        if p.returncode != 0:
            fail(f"sluicectl {' '.join(args)}: {p.stderr.strip()}")
        if show:
            print(f"$ sluicectl {' '.join(args)}\n{p.stdout.rstrip()}", flush=True)
        return p.stdout

    def ctl_json(self, *args):
        return json.loads(self.ctl("--json", *args, show=False))

    def run_load(self, *args):
        cmd = [self.load, "--target", self.target, "--login", self.cluster.login,
               "--passcode-file", self.cluster.passcode_file, "--json", *args]
        print(f"$ sluice-load {' '.join(args)}", flush=True)
        p = subprocess.run(cmd, text=True, capture_output=True, timeout=STEP_TIMEOUT_S)
        try:
            summary = json.loads(p.stdout)
        except json.JSONDecodeError:
            fail(f"sluice-load exited {p.returncode}: {p.stderr[-2000:]}")
        return p.returncode, summary

    def node_of(self, name):
        """Config node name (rabbit1, rabbit2) -> index in the cluster."""
        return int(name.removeprefix("rabbit")) - 1

    def wait(self, what, probe):
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            if probe():
                return
            time.sleep(0.5)
        fail(f"timed out waiting for {what}")

    def placement(self):
        say("1. sluice-load through sluiced to 8 queues, 8 producers and 8 consumers")
        rc, s = self.run_load("-c", str(QUEUES), "-q", str(QUEUES), "--consumer-connections",
                              str(QUEUES), "--queue-pattern", "demo-{i}", "-n", "200",
                              "-s", "512")
        print(f"sent {s.get('sent')} received {s.get('received')} lost {s.get('lost')} "
              f"throughput {s.get('throughput_msg_s', 0):.0f} msg/s")
        if rc != 0:
            fail(f"sluice-load through sluiced reported a problem: {json.dumps(s)[:800]}")
        self.ctl("queues")
        rows = [q for q in self.ctl_json("queues")["queues"] if q["queue"].startswith("demo-")]
        nodes = {q["node"] for q in rows}
        for q in rows:
            info = self.cluster.queue("/", q["queue"])
            home = rabbit_cluster.RabbitCluster.queue_home(info) if info else None
            want = self.cluster.node_names[self.node_of(q["node"])]
            print(f"  {q['queue']}: Sluice placed it on {q['node']}, RabbitMQ has it on {home}")
            if home != want:
                fail(f"{q['queue']} is on {home}, Sluice chose {want}")
        if len(nodes) < 2:
            fail(f"the 8 queues all went to {nodes}")
        print("queues are placed on both nodes, and each lives where Sluice put it")

    def spill_and_deliver(self):
        victim = "rabbit2"
        queues = [f"demo-spill-{i}" for i in range(SPILL_QUEUES)]
        for q in queues:
            self.ctl("queue", "pin", "/", q, victim, show=False)
            self.cluster.api("DELETE", f"/api/queues/%2F/{q}", ok=(204, 404))
        say(f"2. stop {victim} (its queues {', '.join(queues)} are pinned to it) and keep "
            "producing: sluiced spills and acknowledges once durable")
        self.cluster.stop_app(self.node_of(victim))
        self.wait(f"sluiced to see {victim} down", lambda: any(
            n["name"] == victim and n["health"] == "down" for n in self.ctl_json("nodes")["nodes"]))
        rc, s = self.run_load("-c", str(SPILL_QUEUES), "-q", str(SPILL_QUEUES), "--queue-pattern",
                              "demo-spill-{i}", "-n", str(SPILL_MESSAGES), "-s", "256")
        receipted = s.get("acknowledged")
        print(f"sent {s.get('sent')}, receipts {receipted}")
        if receipted != SPILL_QUEUES * SPILL_MESSAGES:
            fail(f"receipts {receipted} of {SPILL_QUEUES * SPILL_MESSAGES}: {json.dumps(s)[:800]}")
        self.ctl("spill")
        say(f"3. restart {victim}: the drainer delivers the backlog")
        self.cluster.start_app(self.node_of(victim))
        self.wait("the backlog to drain", lambda: self.ctl_json("status")["queues_with_backlog"] == 0)
        self.ctl("spill")
        total = 0

        def counted():
            nonlocal total
            total = 0
            for q in queues:
                info = self.cluster.queue("/", q) or {}
                total += info.get("messages", 0) or 0
            return total == receipted

        self.wait("RabbitMQ's counts to show every message", counted)
        print(f"RabbitMQ holds {total} messages in {', '.join(queues)}: every acknowledged "
              "message was delivered")
        for q in queues:
            self.cluster.api("DELETE", f"/api/queues/%2F/{q}", ok=(204, 404))
            self.ctl("queue", "unpin", "/", q, show=False)


def main():
    root, run_dir, state, target = sys.argv[1:5]
    demo = Demo(root, run_dir, state, target)
    try:
        demo.placement()
        demo.spill_and_deliver()
    finally:
        for i in range(len(demo.cluster.nodes)):
            try:
                demo.cluster.start_app(i)
            except rabbit_cluster.ClusterError:
                pass
    print("\ndemo: every step held", flush=True)


if __name__ == "__main__":
    main()
