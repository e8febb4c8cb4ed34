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
# Descriptors sluiced holds per idle spliced session: the client socket and the owner socket (in
# its default splice mode a direction takes a pipe only while bytes pass; with
# gateway.splice = "io_uring" each session keeps two pipes, four descriptors more).
SLUICED_FDS_PER_SESSION = 2
# Descriptors sluiced needs besides sessions: listener, rings, eventfds, spill segments, logs.
SLUICED_FDS_RESERVED = 256
HANDSHAKES_IN_FLIGHT = 256
OPEN_TIMEOUT_S = 120
SETTLE_S = 1.0


def capacity(hard_limit):
    """The most idle spliced sessions sluiced can hold under this hard RLIMIT_NOFILE, rounded
    down to a hundred."""
    return max(0, (hard_limit - SLUICED_FDS_RESERVED) // SLUICED_FDS_PER_SESSION // 100 * 100)


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


def run(arrangements, n, rounds, sluice_load, procs, log_dir, print_fn=print):
    """Interleaved rounds (direct first: the kernel baseline); per arrangement the medians and
    the per-session figures. Raises RuntimeError if a session cannot be opened."""
    if "direct" not in arrangements:
        arrangements = ["direct"] + list(arrangements)
    os.makedirs(log_dir, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the client's sockets
    samples, small = [], {}
    for rnd in range(rounds):
        sink = Sink(procs, sluice_load, None, 3600, connections_max=n + 64)
        try:
            for name in arrangements:
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
        s["fds_per_session"] = statistics.median(fds) / n if fds else None
        caches = sorted({k for m in mine for k in m["cache_delta_bytes"]})
        s["cache_delta_bytes"] = {k: statistics.median(m["cache_delta_bytes"].get(k, 0)
                                                       for m in mine) for k in caches}
        s["rss_start_one_session_kib"] = statistics.median(small[name]) if name in small else None
        summary[name] = s
    base = summary["direct"]
    for name, s in summary.items():
        s["user_growth_per_session_kib"] = s["rss_delta_kib"] / n
        s["user_prealloc_per_session_kib"] = (
            0.0 if s["rss_start_one_session_kib"] is None
            else max(0.0, s["rss_start_kib"] - s["rss_start_one_session_kib"]) / n)
        s["kernel_per_session_kib"] = (s["kernel_delta_kib"] - base["kernel_delta_kib"]) / n
        s["per_session_kib"] = (s["user_growth_per_session_kib"]
                                + s["user_prealloc_per_session_kib"] + s["kernel_per_session_kib"])
        s["kernel_by_cache_per_session_b"] = {
            k: (v - base["cache_delta_bytes"].get(k, 0)) / n
            for k, v in s["cache_delta_bytes"].items()}
    return {"sessions": n, "rounds": rounds, "samples": samples, "summary": summary}


def text(result, requested, why_fewer):
    n = result["sessions"]
    lines = [f"memory per idle session, N = {n:,}"
             + (f" (asked {requested:,}: {why_fewer})" if n != requested else "")
             + f", median of {result['rounds']} round(s), KiB per session; user = RSS growth "
             "+ RSS allocated at start for N session slots; kernel = session slab caches + TCP "
             "buffer pages, minus the direct arrangement's (the client's and the sink's sockets)",
             f"{'arrangement':<12} {'user growth':>11} {'user slots':>10} {'kernel':>8} "
             f"{'total':>8} {'fds':>5}  largest kernel parts (bytes per session)"]
    for name, s in result["summary"].items():
        if name == "direct":
            lines.append(f"{name:<12} {'-':>11} {'-':>10} {'baseline':>8} {'-':>8} {'-':>5}  "
                         f"kernel growth {s['kernel_delta_kib'] / n:.2f} KiB per session "
                         "(2 sockets)")
            continue
        parts = sorted(s["kernel_by_cache_per_session_b"].items(), key=lambda kv: -kv[1])[:6]
        fds = "-" if s["fds_per_session"] is None else f"{s['fds_per_session']:.1f}"
        lines.append(f"{name:<12} {s['user_growth_per_session_kib']:>11.2f} "
                     f"{s['user_prealloc_per_session_kib']:>10.2f} "
                     f"{s['kernel_per_session_kib']:>8.2f} {s['per_session_kib']:>8.2f} "
                     f"{fds:>5}  " + ", ".join(f"{k} {v:,.0f}" for k, v in parts)
                     + f"; TCP buffers {s['tcp_mem_delta_kib'] * 1024 / n:,.0f}")
    return "\n".join(lines)


def plan(requested, arrangements):
    """The N that fits every arrangement under this machine's hard RLIMIT_NOFILE, and why it
    is smaller than asked when it is."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n, why = requested, None
    client_cap = (hard - 512) // 100 * 100  # this process holds the client ends
    if "sluiced" in arrangements and capacity(hard) < n:
        n = capacity(hard)
        why = (f"the hard RLIMIT_NOFILE is {hard:,} and cannot be raised here (no "
               f"CAP_SYS_RESOURCE); sluiced holds {SLUICED_FDS_PER_SESSION} descriptors per "
               f"idle spliced session (client and owner sockets), so at most {n:,}; an "
               f"operator raises LimitNOFILE in sluiced.service (>= 6 x sessions + "
               f"{SLUICED_FDS_RESERVED})")
    if client_cap < n:
        n = client_cap
        why = f"the client holds one descriptor per session under a hard limit of {hard:,}"
    return n, why


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
    n, why = plan(a.sessions, arrangements)
    os.makedirs(a.out, exist_ok=True)
    procs = Processes(a.out)
    try:
        result = run(arrangements, n, a.rounds, os.path.abspath(a.sluice_load), procs, a.out)
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
