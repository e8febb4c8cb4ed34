#!/usr/bin/python3
"""Memory per idle session (issue 6): N idle sessions, direct, via HAProxy and via sluiced.

    bench/idle_sessions.py [--sessions N] [--smoke] [--rounds R] [--arrangements LIST]
                           [--sluice-load PATH] [--sluiced PATH] [--sluicectl PATH] [--out DIR]

Each session: TCP connect, CONNECT, SUBSCRIBE with a receipt (so that sluiced splices it to the
sink), RECEIPT received, then idle. Per arrangement, with the proxy configured for exactly N
sessions (+64), it measures before and while holding the N sessions:
  - user: the proxy's VmRSS growth, plus what it allocated at start for its N session slots
    (its RSS at start configured for N against configured for 1);
  - kernel: the slab caches that sessions use (sockets, files, dentries, inodes, pipes, epoll,
    io_uring requests, kmalloc), from /proc/slabinfo, plus TCP buffer pages (/proc/net/sockstat),
    minus the direct arrangement's growth (the client's and the sink's sockets are in both).
Idle pipes hold no pages; their objects are in the slab. See bench/SCENARIOS.md.
"""

import argparse
import datetime
import json
import os
import resource
import selectors
import socket
import statistics
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenarios.arrangements import ARRANGEMENTS, Processes, Sink, Sluiced  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SESSIONS = 10_000
SMOKE_SESSIONS = 200
# Descriptors a proxy holds per idle session: the client socket and the server socket. sluiced
# parks idle spliced sessions above limits.park_sessions_above (a quarter of its open-file limit
# by default): their sockets move to its rings' fixed-file tables, so that it holds N sessions
# under any limit (Linux 6.8). HAProxy has no such thing: it holds two per session.
PROXY_FDS_PER_SESSION = 2
# Descriptors a proxy needs besides sessions: listeners, rings, eventfds, spill segments, logs.
PROXY_FDS_RESERVED = 256
# sluiced's parking needs IORING_OP_FIXED_FD_INSTALL.
PARKING_KERNEL = (6, 8)
HANDSHAKES_IN_FLIGHT = 256
OPEN_TIMEOUT_S = 120
SETTLE_S = 1.0


def capacity(hard_limit):
    """The most idle sessions a proxy holding two descriptors each can hold under this hard
    RLIMIT_NOFILE, rounded down to a hundred."""
    return max(0, (hard_limit - PROXY_FDS_RESERVED) // PROXY_FDS_PER_SESSION // 100 * 100)


def kernel_parks():
    """True when this kernel can park sessions (sluiced's parking needs Linux 6.8)."""
    release = os.uname().release.split("-")[0].split(".")
    try:
        return (int(release[0]), int(release[1])) >= PARKING_KERNEL
    except (IndexError, ValueError):
        return False


# /proc/slabinfo caches a session's kernel objects live in (prefixes). Other caches (file system
# inodes, page cache metadata, processes) move with whatever else runs on the machine.
SESSION_CACHES = ("TCP", "request_sock_TCP", "tw_sock_TCP", "sock_inode_cache", "filp", "dentry",
                  "inode_cache", "lsm_", "io_kiocb", "eventpoll", "kmalloc-", "skbuff")


def slab_bytes():
    """Bytes of active objects per slab cache, for the caches in SESSION_CACHES."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            w = line.split()
            if w[0].startswith(SESSION_CACHES):
                out[w[0]] = int(w[1]) * int(w[3])
    return out


def tcp_mem_kib():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                w = line.split()
                return int(w[w.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return 0


def rss_kib(pid):
    if pid is None:
        return 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    return None if pid is None else len(os.listdir(f"/proc/{pid}/fd"))


def snapshot(pid):
    slab = slab_bytes()
    return {"rss_kib": rss_kib(pid), "slab": slab, "slab_kib": sum(slab.values()) / 1024,
            "tcp_mem_kib": tcp_mem_kib(), "fds": fd_count(pid)}


def open_sessions(port, n, queues=64):
    """n sessions to 127.0.0.1:port, each CONNECT + SUBSCRIBE (receipt) answered by RECEIPT.
    Returns the open sockets; raises RuntimeError naming the first failure."""
    frame = ("CONNECT\naccept-version:1.2\nhost:/\n\n\0"
             "SUBSCRIBE\nid:0\ndestination:/queue/idle-{q}\nack:auto\nreceipt:idle-{i}\n\n\0")
    sel = selectors.DefaultSelector()
    done, pending, started = [], {}, 0
    deadline = time.monotonic() + OPEN_TIMEOUT_S
    try:
        while len(done) < n:
            while started < n and len(pending) < HANDSHAKES_IN_FLIGHT:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                pending[s] = [started, b""]
                sel.register(s, selectors.EVENT_WRITE)
                started += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(done)} of {n} sessions open after {OPEN_TIMEOUT_S} s")
            for key, events in sel.select(1.0):
                s = key.fileobj
                i, buf = pending[s]
                if events & selectors.EVENT_WRITE:
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        raise RuntimeError(f"session {i}: connect: {os.strerror(err)} "
                                           f"({len(done)} open)")
                    s.send(frame.format(q=i % queues, i=i).encode())  # < 200 B: one send
                    sel.modify(s, selectors.EVENT_READ)
                    continue
                data = s.recv(4096)
                if not data:
                    raise RuntimeError(f"session {i}: closed by the peer after {buf!r} "
                                       f"({len(done)} open)")
                buf += data
                if b"ERROR" in buf:
                    raise RuntimeError(f"session {i}: {buf!r}")
                if f"receipt-id:idle-{i}\n".encode() in buf:
                    sel.unregister(s)
                    del pending[s]
                    done.append(s)
                else:
                    pending[s][1] = buf
    except BaseException:
        for s in done + list(pending):
            s.close()
        raise
    finally:
        sel.close()
    return done


def start_rss(name, sessions_max, procs, sink, log_dir):
    """The proxy's VmRSS 1 s after start, configured for sessions_max sessions."""
    arr = ARRANGEMENTS[name](procs, sink, None, log_dir, {"sessions_max": sessions_max})
    try:
        time.sleep(SETTLE_S)
        return rss_kib(arr.pids[0]) if arr.pids else 0
    finally:
        if getattr(arr, "proc", None) is not None:
            procs.stop(arr.proc)


def measure(name, n, procs, sink, log_dir):
    """One arrangement holding n idle sessions: the snapshots before, with and after them."""
    arr = ARRANGEMENTS[name](procs, sink, None, log_dir, {"sessions_max": n})
    pid = arr.pids[0] if arr.pids else None
    try:
        time.sleep(SETTLE_S)
        before = snapshot(pid)
        t0 = time.monotonic()
        socks = open_sessions(arr.port, n)
        open_s = time.monotonic() - t0
        time.sleep(SETTLE_S)
        held = snapshot(pid)
        spliced = None
        if isinstance(arr, Sluiced):
            status = arr.ctl("status") or {}
            spliced = status.get("sessions", {}).get("spliced")
            if spliced != n:
                for s in socks:
                    s.close()
                raise RuntimeError(f"sluiced reports {spliced} spliced sessions, expected {n} "
                                   f"(status: {status.get('sessions')})")
        for s in socks:
            s.close()
        time.sleep(SETTLE_S)
        after = snapshot(pid)
    finally:
        if getattr(arr, "proc", None) is not None:
            procs.stop(arr.proc)
    caches = {k: held["slab"][k] - before["slab"].get(k, 0) for k in held["slab"]}
    for snap in (before, held, after):
        del snap["slab"]
    return {"arrangement": name, "sessions": n, "open_s": round(open_s, 2),
            "spliced_reported": spliced, "before": before, "held": held, "after_close": after,
            "rss_delta_kib": held["rss_kib"] - before["rss_kib"],
            "rss_start_kib": before["rss_kib"],
            "slab_delta_kib": held["slab_kib"] - before["slab_kib"],
            "tcp_mem_delta_kib": held["tcp_mem_kib"] - before["tcp_mem_kib"],
            "kernel_delta_kib": (held["slab_kib"] - before["slab_kib"]
                                 + held["tcp_mem_kib"] - before["tcp_mem_kib"]),
            "cache_delta_bytes": caches,
            "fds_delta": None if pid is None else held["fds"] - before["fds"]}


def run(arrangements, ns, rounds, sluice_load, procs, log_dir, print_fn=print):
    """Interleaved rounds (direct first: the kernel baseline); per arrangement (holding
    ns[arrangement] sessions) the medians and the per-session figures. Raises RuntimeError if a
    session cannot be opened."""
    if "direct" not in arrangements:
        arrangements = ["direct"] + list(arrangements)
    os.makedirs(log_dir, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the client's sockets
    samples, small = [], {}
    for rnd in range(rounds):
        sink = Sink(procs, sluice_load, None, 3600, connections_max=max(ns.values()) + 64)
        try:
            for name in arrangements:
                n = ns[name]
                if name != "direct":
                    small.setdefault(name, []).append(start_rss(name, 1, procs, sink, log_dir))
                m = measure(name, n, procs, sink, log_dir)
                m["round"] = rnd
                samples.append(m)
                print_fn(f"  idle {name:<8} #{rnd} N={n}: opened in {m['open_s']:.1f} s; "
                         f"proxy RSS +{m['rss_delta_kib']:,} KiB (at start "
                         f"{m['rss_start_kib']:,}"
                         + (f", {small[name][-1]:,} configured for 1 session"
                            if name in small else "")
                         + f"), session slab caches {m['slab_delta_kib']:+,.0f} KiB, TCP "
                         f"buffers {m['tcp_mem_delta_kib']:+,} KiB"
                         + (f", proxy fds +{m['fds_delta']:,}" if m["fds_delta"] is not None
                            else ""), flush=True)
        finally:
            procs.stop(sink.proc)
    summary = {}
    for name in arrangements:
        mine = [m for m in samples if m["arrangement"] == name]
        s = {k: statistics.median(m[k] for m in mine)
             for k in ("rss_delta_kib", "rss_start_kib", "kernel_delta_kib", "slab_delta_kib",
                       "tcp_mem_delta_kib")}
        fds = [m["fds_delta"] for m in mine if m["fds_delta"] is not None]
        s["sessions"] = ns[name]
        s["fds_per_session"] = statistics.median(fds) / ns[name] if fds else None
        caches = sorted({k for m in mine for k in m["cache_delta_bytes"]})
        s["cache_delta_bytes"] = {k: statistics.median(m["cache_delta_bytes"].get(k, 0)
                                                       for m in mine) for k in caches}
        s["rss_start_one_session_kib"] = statistics.median(small[name]) if name in small else None
        summary[name] = s
    # The direct arrangement's growth per session (the client's and the sink's sockets) is
    # taken off each proxy's, per session: the two may hold different N.
    base = summary["direct"]
    nb = ns["direct"]
    for name, s in summary.items():
        n = ns[name]
        s["user_growth_per_session_kib"] = s["rss_delta_kib"] / n
        s["user_prealloc_per_session_kib"] = (
            0.0 if s["rss_start_one_session_kib"] is None
            else max(0.0, s["rss_start_kib"] - s["rss_start_one_session_kib"]) / n)
        s["kernel_per_session_kib"] = s["kernel_delta_kib"] / n - base["kernel_delta_kib"] / nb
        s["per_session_kib"] = (s["user_growth_per_session_kib"]
                                + s["user_prealloc_per_session_kib"] + s["kernel_per_session_kib"])
        s["kernel_by_cache_per_session_b"] = {
            k: v / n - base["cache_delta_bytes"].get(k, 0) / nb
            for k, v in s["cache_delta_bytes"].items()}
    return {"sessions": ns.get("sluiced", nb), "sessions_by": dict(ns), "rounds": rounds,
            "samples": samples, "summary": summary}


def text(result, requested, why_fewer):
    """why_fewer: arrangement -> why it holds fewer sessions than requested."""
    lines = [f"memory per idle session, N = {requested:,} asked"
             + "".join(f"; {name} holds {result['summary'][name]['sessions']:,}: {why}"
                       for name, why in why_fewer.items() if name in result["summary"])
             + f", median of {result['rounds']} round(s), KiB per session; user = RSS growth "
             "+ RSS allocated at start for N session slots; kernel = session slab caches + TCP "
             "buffer pages, minus the direct arrangement's (the client's and the sink's sockets)",
             f"{'arrangement':<12} {'N':>6} {'user growth':>11} {'user slots':>10} {'kernel':>8} "
             f"{'total':>8} {'fds':>5}  largest kernel parts (bytes per session)"]
    for name, s in result["summary"].items():
        n = s["sessions"]
        if name == "direct":
            lines.append(f"{name:<12} {n:>6} {'-':>11} {'-':>10} {'baseline':>8} {'-':>8} "
                         f"{'-':>5}  kernel growth {s['kernel_delta_kib'] / n:.2f} KiB per "
                         "session (2 sockets)")
            continue
        parts = sorted(s["kernel_by_cache_per_session_b"].items(), key=lambda kv: -kv[1])[:6]
        fds = "-" if s["fds_per_session"] is None else f"{s['fds_per_session']:.1f}"
        lines.append(f"{name:<12} {n:>6} {s['user_growth_per_session_kib']:>11.2f} "
                     f"{s['user_prealloc_per_session_kib']:>10.2f} "
                     f"{s['kernel_per_session_kib']:>8.2f} {s['per_session_kib']:>8.2f} "
                     f"{fds:>5}  " + ", ".join(f"{k} {v:,.0f}" for k, v in parts)
                     + f"; TCP buffers {s['tcp_mem_delta_kib'] * 1024 / n:,.0f}")
    return "\n".join(lines)


def plan(requested, arrangements):
    """The N each arrangement holds under this machine's hard RLIMIT_NOFILE (arrangement -> N,
    "direct" included), and why an arrangement holds fewer than asked (arrangement -> text)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    client_cap = (hard - 512) // 100 * 100  # this process holds the client ends
    base = min(requested, client_cap)
    ns, why = {"direct": base}, {}
    for name in arrangements:
        ns[name] = base
        if base < requested:
            why[name] = (f"the client holds one descriptor per session under a hard limit of "
                         f"{hard:,}")
            continue
        parks = name == "sluiced" and kernel_parks()
        if name in ("sluiced", "haproxy") and not parks and capacity(hard) < base:
            ns[name] = capacity(hard)
            why[name] = (f"the hard RLIMIT_NOFILE is {hard:,} and cannot be raised here (no "
                         f"CAP_SYS_RESOURCE); {name} holds {PROXY_FDS_PER_SESSION} descriptors "
                         f"per idle session (client and server sockets), so at most "
                         f"{ns[name]:,}")
    return ns, why


def main(argv):
    p = argparse.ArgumentParser(description="memory per idle spliced session")
    p.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS)
    p.add_argument("--smoke", action="store_true", help=f"{SMOKE_SESSIONS} sessions, 1 round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--arrangements", default="direct,haproxy,sluiced")
    p.add_argument("--sluice-load",
                   default=os.path.join(ROOT, "build/tools/sluice-load/sluice-load"))
    p.add_argument("--sluiced", default=os.path.join(ROOT, "build/gateway/sluiced"))
    p.add_argument("--sluicectl", default=os.path.join(ROOT, "build/tools/sluicectl/sluicectl"))
    p.add_argument("--out", default="/tmp/sluice-idle-" +
                   datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    a = p.parse_args(argv)
    if a.smoke:
        a.sessions, a.rounds = SMOKE_SESSIONS, 1
    arrangements = [x for x in a.arrangements.split(",") if x]
    Sluiced.binary, Sluiced.sluicectl = os.path.abspath(a.sluiced), os.path.abspath(a.sluicectl)
    ns, why = plan(a.sessions, arrangements)
    os.makedirs(a.out, exist_ok=True)
    procs = Processes(a.out)
    try:
        result = run(arrangements, ns, a.rounds, os.path.abspath(a.sluice_load), procs, a.out)
    except RuntimeError as e:
        print(f"idle_sessions: {e}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
    print(text(result, a.sessions, why))
    with open(os.path.join(a.out, "idle.json"), "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
