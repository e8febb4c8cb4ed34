#!/usr/bin/python3
"""Client fidelity: three STOMP client libraries nobody here wrote see the same RabbitMQ
through sluiced as they see directly.

Each library runs one fixed scenario (tests/integration/clients/): stomp.py (python3-stomp),
Ruby's stomp gem (ruby-stomp) and Perl's Net::Stomp (libnet-stomp-perl), straight to
RabbitMQ node 0's STOMP port and through sluiced (login_check "eager", the default) in front
of the two-node cluster. The scenario, with heart-beat 2000,2000 and vhost "/":
 1. CONNECT: the CONNECTED frame's header names (sorted), version, heart-beat, server;
 2. SUBSCRIBE /queue/<prefix>-a ack client-individual with a receipt, two SENDs with receipts,
    both MESSAGEs, ACK the first and NACK the second with receipts, the NACKed message
    redelivered (RabbitMQ requeues it);
 3. BEGIN (receipt), SEND to -b in it, ABORT (receipt); BEGIN, SEND, COMMIT (receipt);
    SUBSCRIBE -b and the bodies that arrive within 3 s;
 4. UNSUBSCRIBE both with receipts;
 5. 10 s idle with heart-beats both ways, then a SEND with a receipt;
 8. DISCONNECT with a receipt;
 6. on a fresh session, a SEND with a receipt to "/invalid-dest/x": the ERROR's message and
    body, and whether it names the receipt (RabbitMQ's does not);
 7. a wrong passcode, and vhost "no-such-vhost": each refused at CONNECT, with its ERROR.
Two gateways run side by side: one configured by default, where a login a node accepted is
answered from the login cache for a minute (most good CONNECTs of the run: the gateway writes
that CONNECTED itself, with the node's server header), and one with login_cache_ms = 0, where
a node answers every CONNECT. Each library runs direct and through both: nine programs at
once, about 15 s.

Each program prints its transcript as one JSON object. Through either gateway, a library's
transcript must equal its direct one (==), but for the one field that cannot:
  - "timing": the heart-beats counted in step 5 (received from the server, sent by the
    client) and each step's duration, which vary from run to run.
Nothing else is left out (the CONNECTED frame's session header is random: its name is
compared, its value never recorded). Every transcript must also show the expected outcomes
(every receipt asked of a good session, both MESSAGEs and the redelivery, only the committed
body, the ERRORs, at least 3 beats each way over the idle step where the client counts them:
both ways for stomp.py and the stomp gem, received for Net::Stomp, which has no heart-beats
and whose program sends the client's itself), so that the sides cannot agree by failing alike;
and each gateway's login-check counters must show that a node checked every CONNECT through
it (or, with the cache, accepted that login before).

Usage: client_fidelity_test.py SLUICED SLUICECTL
Attaches to the cluster named by $SLUICE_RABBIT_CLUSTER (tools/dev/test starts one for the
whole run) or starts a private one. Says SKIPPED (exit 77) when a library is not installed.
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_util import (Failure, Sluiced, base_config, check, cluster_nodes,  # noqa: E402
                          delete_queues_quietly, free_port, run_main, say)

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients")
PREFIX = "sluice-fid-%d-" % os.getpid()
CLIENT_TIMEOUT_S = 90  # each program's own watchdog ends it after 75 s
EXCLUDED = ("timing",)
MIN_BEATS = 3  # each way over the 10 s idle step (about 5 at 2 s), where the library counts them
# The programs, and how to check that their library is there.
LIBRARIES = {
    "stomp.py": {"argv": ["/usr/bin/python3", os.path.join(CLIENTS, "fidelity_stomp_py.py")],
                 "probe": ["/usr/bin/python3", "-c", "import stomp"],
                 "package": "python3-stomp", "counts_beats": ("received", "sent")},
    "ruby": {"argv": ["ruby", os.path.join(CLIENTS, "fidelity_ruby.rb")],
             "probe": ["ruby", "-e", "require 'stomp'"],
             "package": "ruby-stomp", "counts_beats": ("received", "sent")},
    # Net::Stomp has no heart-beats: its program sends them and peeks at the server's.
    "perl": {"argv": ["perl", os.path.join(CLIENTS, "fidelity_perl.pl")],
             "probe": ["perl", "-MNet::Stomp", "-e", "1"],
             "package": "libnet-stomp-perl", "counts_beats": ("received",)},
}
# Where each library's program connects: node 0 itself, or a gateway (its [stomp] keys).
SIDES = {"direct": None,
         "through sluiced": "",
         "through sluiced, no login cache": "[stomp]\nlogin_cache_ms = 0\n"}


def missing_libraries():
    """Reasons, one per library that cannot run here."""
    reasons = []
    for name, lib in LIBRARIES.items():
        if shutil.which(lib["probe"][0]) is None:
            reasons.append(f"{name}: no {lib['probe'][0]} (package {lib['package']})")
            continue
        p = subprocess.run(lib["probe"], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            reasons.append(f"{name}: {' '.join(lib['probe'])} failed (package "
                           f"{lib['package']}): {p.stderr.strip()[:200]}")
    return reasons


def flatten(value, path=""):
    """{"a.b[0]": leaf} of a transcript, for a readable difference."""
    if isinstance(value, dict):
        out = {}
        for k in value:
            out.update(flatten(value[k], f"{path}.{k}" if path else k))
        return out or {path: {}}
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{path}[{i}]"))
        return out
    return {path: value}


def compared(transcript):
    return {k: v for k, v in transcript.items() if k not in EXCLUDED}


def differences(direct, through):
    """The compared fields of the transcript `through` that differ from `direct`'s."""
    a, b = flatten(compared(direct)), flatten(compared(through))
    missing = object()
    return [f"{k}: direct {a.get(k, '(absent)')!r}, here {b.get(k, '(absent)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def expectation_problems(lib, t):
    """What the transcript t of library lib shows against the scenario's expected outcomes."""
    problems = []

    def expect(cond, what):
        if not cond:
            problems.append(what)

    def step(name):
        s = t.get(name)
        if not isinstance(s, dict):
            problems.append(f"no step {name}")
            return {}
        expect("error" not in s, f"{name}: {s.get('error')}")
        return s
    expect("watchdog" not in t, f"watchdog: {t.get('watchdog')}")
    c = step("connect")
    expect(c.get("version") == "1.2", f"connect: version {c.get('version')!r}, not 1.2")
    expect(c.get("heart-beat") not in (None, "0,0"),
           f"connect: heart-beat {c.get('heart-beat')!r}: not negotiated")
    expect({"version", "heart-beat", "server", "session"} <= set(c.get("header_names", [])),
           f"connect: header names {c.get('header_names')}")
    a = step("ack_nack")
    expect(a.get("receipts") == ["a-sub", "a-send-1", "a-send-2"],
           f"ack_nack: receipts {a.get('receipts')}")
    expect(a.get("bodies") == ["a-1", "a-2"], f"ack_nack: bodies {a.get('bodies')}")
    expect(a.get("ack_nack_receipts") == ["a-ack", "a-nack"],
           f"ack_nack: ACK/NACK receipts {a.get('ack_nack_receipts')}")
    expect(a.get("redelivered") == [["a-2", "true"]],
           f"ack_nack: after the NACK {a.get('redelivered')}, not a-2 redelivered")
    expect(a.get("other") == [], f"ack_nack: other frames {a.get('other')}")
    x = step("transactions")
    expect(x.get("receipts") == ["tx-begin-1", "tx-abort", "tx-begin-2", "tx-commit", "b-sub"],
           f"transactions: receipts {x.get('receipts')}")
    expect(x.get("bodies") == ["committed"],
           f"transactions: bodies {x.get('bodies')}, not only the committed one")
    expect(x.get("other") == [], f"transactions: other frames {x.get('other')}")
    u = step("unsubscribe")
    expect(u.get("receipts") == ["unsub-a", "unsub-b"],
           f"unsubscribe: receipts {u.get('receipts')}")
    h = step("heart_beats")
    expect(h.get("receipts") == ["idle-send"] and h.get("connected_after") is True,
           f"heart_beats: after 10 s idle: {h}")
    timing = t.get("timing", {})
    for way in LIBRARIES[lib]["counts_beats"]:
        n = timing.get(f"beats_{way}")
        expect(isinstance(n, int) and n >= MIN_BEATS,
               f"heart_beats: {n} beats {way} over the idle step, expected >= {MIN_BEATS}")
    d = step("disconnect")
    expect(d.get("receipts") == ["disc"], f"disconnect: receipts {d.get('receipts')}")
    i = step("invalid_destination")
    expect(i.get("frames") == ["ERROR"] and i.get("message"),
           f"invalid_destination: frames {i.get('frames')}, message {i.get('message')!r}")
    for name in ("bad_passcode", "bad_vhost"):
        b = step(name)
        expect(b.get("failed_at_connect") is True and b.get("frame") == "ERROR"
               and b.get("message"), f"{name}: {b}")
    return problems


class Run:
    def __init__(self, sluiced, sluicectl, cluster, work):
        self.sluiced, self.sluicectl, self.cluster, self.work = sluiced, sluicectl, cluster, work
        self.login, self.passcode = cluster.login, cluster.passcode
        self.gw = None  # the gateway whose log run_main prints on a failure
        self.gateways = {}  # side: Sluiced
        self.queues = []

    def start_gateway(self, n, stomp):
        work = os.path.join(self.work, f"gw{n}")
        os.makedirs(work, exist_ok=True)
        port = free_port()
        text = base_config(f"gw-fidelity-{n}", work, port, self.cluster,
                           nodes=cluster_nodes(self.cluster), spill="allow_anonymous = true",
                           extra=stomp)
        return Sluiced(self.sluiced, self.sluicectl, work, text, port).start()

    def launch(self, lib, n, port):
        prefix = f"{PREFIX}{lib.replace('.', '')}-{n}"
        self.queues += [prefix + "-a", prefix + "-b"]
        argv = LIBRARIES[lib]["argv"] + ["127.0.0.1", str(port), self.login, self.passcode,
                                         prefix, "/"]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def collect(self, procs):
        """{(lib, side): transcript}; a program that failed to give one is a Failure."""
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        out, failures = {}, []
        for key, p in procs.items():
            try:
                stdout, stderr = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()  # by PID: the process this test started
                stdout, stderr = p.communicate()
                failures.append(f"{key[0]} {key[1]}: no exit within {CLIENT_TIMEOUT_S} s")
            try:
                out[key] = json.loads(stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                failures.append(f"{key[0]} {key[1]}: exit {p.returncode}, no transcript; "
                                f"stdout {stdout[-500:]!r}, stderr {stderr[-1500:]!r}")
                continue
            if p.returncode != 0 or stderr.strip():
                say(f"    {key[0]} {key[1]}: exit {p.returncode}, stderr {stderr.strip()[-500:]!r}")
        check(not failures, "; ".join(failures))
        return out

    @staticmethod
    def login_checks(gw):
        got = {}
        for line in gw.ctl("metrics").stdout.splitlines():
            key, _, value = line.rpartition(" ")
            if key.startswith("sluice_login_checks_total{"):
                got[key.split('result="')[1].split('"')[0]] = int(float(value))
        return got

    def run(self):
        try:
            self.run_clients()
        except Failure:
            # run_main prints the log of self.gw (the last gateway): the others' here.
            for side, gw in self.gateways.items():
                if gw is not self.gw:
                    print(f"sluiced log of {side} (tail):\n{gw.log_tail()}", file=sys.stderr)
            raise

    def run_clients(self):
        t0 = time.monotonic()
        ports = {}
        for n, (side, stomp) in enumerate(SIDES.items()):
            if stomp is None:
                ports[side] = self.cluster.nodes[0]["stomp_port"]
            else:
                self.gw = self.gateways[side] = self.start_gateway(n, stomp)
                ports[side] = self.gw.port
        start_s = time.monotonic() - t0
        procs = {(lib, side): self.launch(lib, n, ports[side])
                 for lib in LIBRARIES for n, side in enumerate(SIDES)}
        transcripts = self.collect(procs)
        clients_s = time.monotonic() - t0 - start_s

        problems = []
        direct_side, *through_sides = SIDES
        for lib in LIBRARIES:
            direct = transcripts[(lib, direct_side)]
            found = [f"{direct_side}: {p}" for p in expectation_problems(lib, direct)]
            for side in through_sides:
                t = transcripts[(lib, side)]
                found += [f"{side}: {p}" for p in expectation_problems(lib, t)]
                found += [f"{side} differs: {d}" for d in differences(direct, t)]
            if found:
                problems.append(f"{lib} ({direct.get('library')}):\n    " + "\n    ".join(found)
                                + "".join(f"\n  {side}: "
                                          + json.dumps(transcripts[(lib, side)], sort_keys=True)
                                          for side in SIDES))
                continue
            timings = [transcripts[(lib, side)]["timing"] for side in SIDES]
            c = direct["connect"]
            say(f"ok ({lib}, {direct['library']}): direct and through both gateways alike: "
                f"CONNECTED {c['server']} {c['version']} heart-beat {c['heart-beat']}; receipts "
                f"for SUBSCRIBE, SEND, ACK, NACK, BEGIN, ABORT, COMMIT, UNSUBSCRIBE, DISCONNECT; "
                f"NACKed message redelivered; only the committed body; after 10 s idle still "
                f"receipted (beats received "
                + "/".join(str(t.get("beats_received")) for t in timings) + ", sent "
                + "/".join(str(t.get("beats_sent")) for t in timings)
                + f"); invalid destination ERROR {direct['invalid_destination']['message']!r}; "
                f"bad passcode and vhost refused at CONNECT "
                f"({direct['bad_passcode']['message']!r})")
        check(not problems, "client transcripts:\n" + "\n".join(problems))

        # Through each gateway, 2 good sessions and 2 refused ones per library: a node checked
        # every CONNECT (eager), or the cache answered for a login a node accepted; without
        # the cache, a node answered every one.
        n = len(LIBRARIES)
        for side, gw in self.gateways.items():
            checks = self.login_checks(gw)
            cached_ok = SIDES[side] == "" or checks.get("cached") == 0
            check(checks.get("refused") == 2 * n
                  and checks.get("accepted", 0) + checks.get("cached", 0) == 2 * n
                  and checks.get("failed") == 0 and checks.get("unchecked") == 0 and cached_ok,
                  f"{side}: sluice_login_checks_total {checks}, expected {2 * n} refused and "
                  f"{2 * n} accepted" + (" or cached" if SIDES[side] == "" else ""))
            gw.wait_idle()
            say(f"ok ({side}): sluiced's login checks {checks}; sessions back to 0")
        say(f"times: gateways started {start_s:.1f} s, clients {clients_s:.1f} s (all "
            f"{len(procs)} at once), total {time.monotonic() - t0:.1f} s")

    def cleanup(self):
        for side, gw in self.gateways.items():
            try:
                gw.stop()  # (run_main stopped self.gw; stop() again does nothing)
            except Failure as e:
                print(f"FAILED: {side}: {e}", file=sys.stderr)
        delete_queues_quietly(self.cluster, self.queues)


def main():
    if len(sys.argv) == 3:
        reasons = missing_libraries()
        if reasons:
            print("SKIPPED: " + "; ".join(reasons), flush=True)
            return 77
    return run_main(__doc__, "sluice-fid-", "client_fidelity", Run)


if __name__ == "__main__":
    sys.exit(main())
