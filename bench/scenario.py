#!/usr/bin/python3
"""Scenario harness (issues 5, 6): sluice-load against the sink: direct, via HAProxy, via sluiced.

    bench/scenario.py SCENARIO|all|gateway [--repeat N] [--seconds S] [--out DIR] [--smoke]
                      [--sluice-load PATH] [--sluiced PATH] [--sluicectl PATH]
                      [--spill-bench PATH] [--arrangements LIST] [--no-pin]

For each scenario it starts the sink (`sluice-load serve`), HAProxy (TCP mode, generated
config) and sluiced (generated config, the sink as its one node) on free loopback ports, runs
sluice-load against each arrangement interleaved (direct, haproxy, sluiced, direct, ...) and
repeated, prints medians and ratios against direct, and writes results.json and chart.png
(gnuplot) into --out. `gateway` runs the issue 6 acceptance set (bulk, connect, latency, spill,
the spill log's own benchmark, memory per idle session), prints the acceptance table and writes
it with the chart and the command into bench/results/. See bench/SCENARIOS.md.
Exit code: 0 when every run passed, 1 when any run failed or lost messages, 2 for usage errors.
A missed speed or memory target is printed, never a failure.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idle_sessions  # noqa: E402
from scenarios import gateway, report  # noqa: E402
from scenarios.arrangements import (ARRANGEMENTS, Processes, Relay, Sink, Sluiced,  # noqa: E402
                                    cpu_seconds, die_with_parent, pinned, run_delay_seconds)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SLUICE_LOAD = ["build-release/tools/sluice-load/sluice-load",
                       "build/tools/sluice-load/sluice-load"]
DRAIN_TIMEOUT_S = 5
# A run that takes this much longer than its --duration + drain is killed and counted failed.
RUN_SLACK_S = 20

# Each scenario: sluice-load options (the harness adds --target, --duration, --json and the
# drain timeout), the throughput figure the table leads with, and which latency it reports.
SCENARIOS = {
    "bulk": {
        "what": "bulk throughput: 2 producer and 2 consumer sessions, 64 KiB bodies, receipts",
        "args": ["-c", "2", "--consumer-connections", "2", "-q", "2", "-s", "64K", "-w", "16"],
        "lead": "mib_s",
        "latency": "delivery",
    },
    "small": {
        "what": "small-message rate: 64 producers on 16 connections, 8 consumers, 8 queues, "
                "256 B bodies with receipts (window 64)",
        "args": ["-c", "16", "-p", "4", "--consumer-connections", "8", "-q", "8", "-s", "256"],
        "lead": "msg_s",
        "latency": "receipt",
    },
    "sessions": {
        "what": "session rate: 16 producer connections in new-session mode (CONNECT, 10 SENDs "
                "with receipts, DISCONNECT, close, reconnect), 4 consumers on 4 queues",
        "args": ["-c", "16", "--new-session", "10", "--consumer-connections", "4", "-q", "4",
                 "-s", "256"],
        "lead": "sessions_s",
        "latency": "receipt",
    },
    "latency": {
        "what": "latency at a fixed offered load: 8 producers x 2,500 msg/s = 20,000 msg/s of "
                "256 B with receipts, 8 consumers on 8 queues",
        "args": ["-c", "8", "--consumer-connections", "8", "-q", "8", "-s", "256",
                 "-r", "2500"],
        "lead": "msg_s",
        "latency": "delivery",
    },
    "connect": {
        "what": "new-session rate: 16 producer connections in new-session mode with one SEND "
                "per session (CONNECT, SEND with receipt, DISCONNECT with receipt, close, "
                "reconnect), 4 consumers on 4 queues",
        "args": ["-c", "16", "--new-session", "1", "--consumer-connections", "4", "-q", "4",
                 "-s", "256"],
        "lead": "sessions_s",
        "latency": "receipt",
    },
    "spill": {
        "what": "spill mode: sluiced whose one node is a closed port, so every session is a "
                "spill session; 64 connections x 4 producers, 1 KiB bodies, window 4 (1,024 "
                "SENDs awaiting durable receipts), 16 queues, no consumers",
        "args": ["-c", "64", "-p", "4", "-w", "4", "-q", "16", "-s", "1K"],
        "lead": "msg_s",
        "latency": "receipt",
        "only": ["sluiced"],  # the sink stores nothing: direct and HAProxy have no spill mode
        "sluiced": {"owner_down": True},
    },
}
# `all` runs every scenario; `gateway` the issue 6 acceptance set.
GATEWAY_SCENARIOS = ["bulk", "connect", "latency", "spill"]
# ... and those of them that also run `relay`, the floor the acceptance text shows.
GATEWAY_RELAY_SCENARIOS = ["bulk"]
TOOL_CHECK_RATIO_MIN = 1.5


class Stop(Exception):
    """SIGTERM/SIGHUP: unwind like Ctrl-C so that every `finally` ends its processes."""


def on_signal(signum, frame):
    raise Stop(f"signal {signum}")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="sluice-load scenarios against the sink: direct and via HAProxy")
    p.add_argument("scenario", choices=list(SCENARIOS) + ["all", "gateway"])
    p.add_argument("--repeat", type=int, default=3, help="runs per arrangement (default 3)")
    p.add_argument("--seconds", type=float, default=5.0,
                   help="producing time of each run (default 5)")
    p.add_argument("--out", help="directory for results.json, chart.png and the logs "
                   "(default /tmp/sluice-scenarios-DATE-TIME)")
    p.add_argument("--smoke", action="store_true",
                   help="CI check: 1 repetition of 1 s per run; fails if any run fails")
    p.add_argument("--sluice-load", help="sluice-load binary (default: the first that exists "
                   "of " + ", ".join(DEFAULT_SLUICE_LOAD) + ", from the repository root)")
    p.add_argument("--sluiced", help="sluiced binary (default: gateway/sluiced in sluice-load's "
                   "build directory)")
    p.add_argument("--sluicectl", help="sluicectl binary (default: tools/sluicectl/sluicectl "
                   "in sluice-load's build directory)")
    p.add_argument("--spill-bench", help="spill_bench binary, the spill scenario's reference "
                   "(default: bench/spill_bench in sluice-load's build directory, if built)")
    p.add_argument("--splice-relay", help="splice_relay binary, the `relay` arrangement "
                   "(default: bench/splice_relay in sluice-load's build directory, if built)")
    p.add_argument("--idle-sessions", type=int, default=idle_sessions.DEFAULT_SESSIONS,
                   help="idle sessions to hold (gateway and all; default %(default)s, smoke "
                   f"{idle_sessions.SMOKE_SESSIONS})")
    p.add_argument("--results-dir", default=os.path.join(ROOT, "bench", "results"),
                   help="where `gateway` (not --smoke) writes its table, chart and command")
    p.add_argument("--arrangements",
                   help="comma-separated, first is the reference (default: direct,haproxy and "
                   "sluiced when its binary is found; `gateway`: direct,haproxy,sluiced)")
    p.add_argument("--no-pin", action="store_true", help="no taskset pinning")
    p.add_argument("--load-cpu", default="0", help="CPU list for sluice-load (default 0)")
    p.add_argument("--server-cpu", default="1",
                   help="CPU list for the sink and HAProxy (default 1)")
    a = p.parse_args(argv)
    if a.smoke:
        a.repeat, a.seconds = 1, 1.0
    if a.repeat < 1 or a.repeat > 100:
        p.error("--repeat: between 1 and 100")
    if not 0.5 <= a.seconds <= 600:
        p.error("--seconds: between 0.5 and 600")
    if a.sluice_load is None:
        found = [os.path.join(ROOT, c) for c in DEFAULT_SLUICE_LOAD
                 if os.access(os.path.join(ROOT, c), os.X_OK)]
        if not found:
            p.error("no sluice-load found at " + ", ".join(DEFAULT_SLUICE_LOAD) +
                    ": build it (ninja -C build-release tools/sluice-load/sluice-load) or "
                    "pass --sluice-load PATH")
        a.sluice_load = found[0]
    elif not os.access(a.sluice_load, os.X_OK):
        p.error(f"--sluice-load: {a.sluice_load} is not an executable file")
    a.sluice_load = os.path.abspath(a.sluice_load)
    build = os.path.dirname(os.path.dirname(os.path.dirname(a.sluice_load)))
    for opt, rel in (("sluiced", "gateway/sluiced"), ("sluicectl", "tools/sluicectl/sluicectl"),
                     ("spill_bench", "bench/spill_bench"),
                     ("splice_relay", "bench/splice_relay")):
        given = getattr(a, opt)
        if given is not None and not os.access(given, os.X_OK):
            p.error(f"--{opt.replace('_', '-')}: {given} is not an executable file")
        if given is None and os.access(os.path.join(build, rel), os.X_OK):
            given = os.path.join(build, rel)
        setattr(a, opt, None if given is None else os.path.abspath(given))
    have_sluiced = a.sluiced is not None and a.sluicectl is not None
    if a.arrangements is None:
        a.arrangements = "direct,haproxy" + (",sluiced" if have_sluiced else "")
    a.arrangements = [x for x in a.arrangements.split(",") if x]
    unknown = [x for x in a.arrangements if x not in ARRANGEMENTS]
    if unknown or not a.arrangements:
        p.error(f"--arrangements: unknown {unknown}; known: {', '.join(ARRANGEMENTS)}")
    if a.scenario == "gateway" and a.arrangements != ["direct", "haproxy", "sluiced"]:
        p.error("gateway: the acceptance compares direct, haproxy and sluiced; leave "
                "--arrangements out")
    if a.scenario == "gateway" and a.splice_relay is not None:
        # bulk also runs the floor of any splicing proxy (bench/splice_relay), shown beside the
        # acceptance table; the other scenarios do not need it
        a.arrangements.append("relay")
    if any(x.startswith("sluiced") for x in a.arrangements) and not have_sluiced:
        p.error(f"sluiced arrangement: no sluiced or sluicectl found in {build} (pass --sluiced "
                "PATH --sluicectl PATH)")
    if "relay" in a.arrangements and a.splice_relay is None:
        p.error(f"relay arrangement: no splice_relay found in {build} (build the benchmarks or "
                "pass --splice-relay PATH)")
    Sluiced.binary, Sluiced.sluicectl = a.sluiced, a.sluicectl
    Relay.binary = a.splice_relay
    if a.smoke:
        a.idle_sessions = idle_sessions.SMOKE_SESSIONS
    if a.no_pin or (os.cpu_count() or 1) < 2:
        a.load_cpu = a.server_cpu = None
    if a.out is None:
        a.out = "/tmp/sluice-scenarios-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return a


def machine_info(sluice_load):
    def first(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                                  cwd=ROOT).stdout.splitlines()[0].strip()
        except (OSError, IndexError, subprocess.SubprocessError):
            return None
    model = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "cpu_model": model,
        "haproxy": first(["/usr/sbin/haproxy", "-v"]),
        "sluice_load": sluice_load,
        "sluiced": Sluiced.binary,
        "commit": commit(),
        "python": platform.python_version(),
    }


def commit():
    """HEAD's commit, read from .git (no git process: other work may be using the repository)."""
    try:
        with open(os.path.join(ROOT, ".git", "HEAD")) as f:
            head = f.read().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        path = os.path.join(ROOT, ".git", ref)
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
        with open(os.path.join(ROOT, ".git", "packed-refs")) as f:
            for line in f:
                if line.rstrip().endswith(" " + ref):
                    return line.split()[0]
    except OSError:
        pass
    return None


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def run_load(cmd, log_path, timeout_s):
    """One sluice-load run: its JSON summary, exit code, an error if it did not finish, the
    CPU seconds it used and the seconds it waited for a CPU (sampled while it ran)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    delay = 0.0
    with open(log_path, "w") as log, tempfile.TemporaryFile("w+") as out:
        # stdout to a file, not a pipe: the process is polled (for schedstat) while it runs
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=log,
                                text=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout_s
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    return None, None, f"killed after {timeout_s:.0f} s", 0.0, None
                d = run_delay_seconds(proc.pid)
                delay = d if d is not None else delay
                try:
                    proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:  # timed out, or Ctrl-C or SIGTERM while waiting
                proc.kill()
                proc.wait()
        out.seek(0)
        text = out.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        summary = json.loads(text)
    except ValueError:
        return None, proc.returncode, "no JSON summary on stdout", cpu, delay
    return summary, proc.returncode, None, cpu, delay


def failure_of(summary, rc, error):
    """Why this run does not count, or None."""
    if error:
        return error
    if rc != 0:
        return (f"sluice-load exited {rc} (result: {summary.get('result')}; first error: "
                f"{summary.get('first_error') or 'none'})")
    # Without consumers (the spill scenario) nothing is checked and sluice-load counts every
    # message as `lost`: only its errors (RECEIPTs that never came, ERROR frames) count then.
    checks = (("lost", "duplicated", "out_of_order", "errors") if summary.get("checked", True)
              else ("errors",))
    bad = {k: summary.get(k, 0) for k in checks}
    if any(bad.values()):
        return "sluice-load reported " + ", ".join(f"{k}={v}" for k, v in bad.items() if v)
    if not summary.get("acknowledged"):
        return "nothing acknowledged"
    return None


def run_scenario(args, name, procs, out_dir, record):
    """Runs one scenario, filling `record` as it goes (kept when interrupted)."""
    spec = SCENARIOS[name]
    arrangements = [a for a in args.arrangements if a in spec.get("only", args.arrangements)]
    if args.scenario == "gateway" and name not in GATEWAY_RELAY_SCENARIOS:
        arrangements = [a for a in arrangements if a != "relay"]
    if not arrangements:
        print(f"\n== {name}: skipped (needs the arrangement(s) {', '.join(spec['only'])})",
              flush=True)
        return
    log_dir = os.path.join(out_dir, name)
    os.makedirs(log_dir, exist_ok=True)
    run_s = args.seconds + DRAIN_TIMEOUT_S + RUN_SLACK_S
    lifetime_s = len(arrangements) * args.repeat * run_s + 60
    print(f"\n== {name}: {spec['what']}", flush=True)
    sink = Sink(procs, args.sluice_load, args.server_cpu, lifetime_s)
    runs = []
    record.update({
        "scenario": name, "what": spec["what"], "lead": spec["lead"],
        "latency_kind": spec["latency"], "sink_command": sink.cmd,
        "arrangements": arrangements, "arrangement_commands": {}, "runs": runs,
    })
    started = []
    try:
        for a in arrangements:
            started.append(ARRANGEMENTS[a](procs, sink, args.server_cpu, log_dir, spec.get(a)))
            record["arrangement_commands"][a] = started[-1].commands
        for rep in range(args.repeat):
            for arr in started:
                cmd = pinned([args.sluice_load, "--target", f"127.0.0.1:{arr.port}",
                              *spec["args"], "--duration", f"{args.seconds:g}",
                              "--drain-timeout", str(DRAIN_TIMEOUT_S), "--json"],
                             args.load_cpu)
                server_pids = [sink.proc.pid] + arr.pids
                cpu_before = [cpu_seconds(p) for p in server_pids]
                delay_before = [run_delay_seconds(p) for p in server_pids]
                t0 = time.monotonic()
                summary, rc, error, load_cpu, load_delay = run_load(
                    cmd, os.path.join(log_dir, f"{arr.name}-{rep}.log"),
                    args.seconds + DRAIN_TIMEOUT_S + RUN_SLACK_S)
                wall = time.monotonic() - t0
                cpu_after = [cpu_seconds(p) for p in server_pids]
                delay_after = [run_delay_seconds(p) for p in server_pids]
                server_wait = [None if b is None or a is None else round((a - b) / wall, 3)
                               for b, a in zip(delay_before, delay_after)]
                server_cpu_s = [None if b is None or a is None else a - b
                                for b, a in zip(cpu_before, cpu_after)]
                server_cpu = [None if c is None else round(c / wall, 3) for c in server_cpu_s]
                failure = failure_of(summary or {}, rc, error)
                run = {
                    "scenario": name, "arrangement": arr.name, "repetition": rep,
                    "command": cmd, "exit_code": rc, "failure": failure,
                    "wall_s": round(wall, 3), "loadavg": loadavg(),
                    # CPU used / wall time: 1.0 is one core busy the whole run
                    "cpu_cores": {"sluice-load": round(load_cpu / wall, 3),
                                  "sink": server_cpu[0],
                                  **({arr.name: server_cpu[1]} if arr.pids else {})},
                    "cpu_s": {"sluice-load": round(load_cpu, 3),
                              "sink": None if server_cpu_s[0] is None
                              else round(server_cpu_s[0], 3),
                              **({arr.name: round(server_cpu_s[1], 3)}
                                 if arr.pids and server_cpu_s[1] is not None else {})},
                    # time runnable but waiting for a CPU / wall time: starved, not idle
                    "cpu_wait": {"sluice-load": None if load_delay is None
                                 else round(load_delay / wall, 3),
                                 "sink": server_wait[0],
                                 **({arr.name: server_wait[1]} if arr.pids else {})},
                    "figures": report.figures(summary, spec) if summary else None,
                    "summary": summary,
                }
                runs.append(run)
                print(report.run_line(run), flush=True)
    finally:
        for arr in reversed(started):
            if getattr(arr, "proc", None) is not None:
                procs.stop(arr.proc)
            if hasattr(arr, "cleanup"):
                arr.cleanup()
        procs.stop(sink.proc)


def main(argv):
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if "haproxy" in args.arrangements and not os.access("/usr/sbin/haproxy", os.X_OK):
        print("scenario: /usr/sbin/haproxy is missing (tools/dev/setup installs it)",
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    names = (list(SCENARIOS) if args.scenario == "all" else
             GATEWAY_SCENARIOS if args.scenario == "gateway" else [args.scenario])
    # The acceptance extras (spill log reference, idle sessions, acceptance table) come with
    # `gateway`, and with `all` when sluiced is one of the arrangements.
    extras = args.scenario == "gateway" or (args.scenario == "all"
                                             and "sluiced" in args.arrangements)
    started_at = datetime.datetime.now(datetime.timezone.utc)
    results = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "machine": machine_info(args.sluice_load),
        "command": [sys.argv[0]] + list(argv),
        "loadavg_start": loadavg(),
        "settings": {"repeat": args.repeat, "seconds": args.seconds, "smoke": args.smoke,
                     "arrangements": args.arrangements, "load_cpu": args.load_cpu,
                     "server_cpu": args.server_cpu, "drain_timeout_s": DRAIN_TIMEOUT_S},
        "scenarios": [],
    }
    print(f"sluice-load: {args.sluice_load}; sluiced: {args.sluiced}; pinning: "
          + (f"sluice-load on CPU {args.load_cpu}, sink and proxies on CPU {args.server_cpu}"
             if args.load_cpu is not None else "none")
          + f"; load average {' '.join(map(str, results['loadavg_start']))}; out: {args.out}")
    procs = Processes(args.out)
    interrupted = None
    try:
        for name in names:
            record = {}
            results["scenarios"].append(record)
            run_scenario(args, name, procs, args.out, record)
        if extras:
            results["spill_bench"] = gateway.spill_reference(args.spill_bench, args.smoke,
                                                              args.out)
            if not args.smoke and args.server_cpu is not None and args.spill_bench:
                # the same again with only the CPU sluiced had: like for like
                results["spill_bench_pinned"] = gateway.spill_reference(
                    args.spill_bench, args.smoke, args.out, args.server_cpu)
            results["idle"] = gateway.idle(args, procs)
    except (KeyboardInterrupt, Stop) as e:
        interrupted = str(e) or "interrupted"
    except RuntimeError as e:  # a process that would not start: named in the message
        interrupted = str(e)
    finally:
        procs.stop_all()
    results["loadavg_end"] = loadavg()
    results["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds")
    results["scenarios"] = [sc for sc in results["scenarios"] if sc.get("runs")]
    for sc in results["scenarios"]:
        sc["medians"], sc["ratios"] = report.medians_and_ratios(sc, sc["arrangements"])
    results["tool_check"] = report.tool_check(results, TOOL_CHECK_RATIO_MIN)
    if extras:
        results["acceptance"] = gateway.acceptance(results)
    results["interrupted"] = interrupted
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print()
    print(report.table(results, args.arrangements))
    print(report.tool_check_text(results["tool_check"], TOOL_CHECK_RATIO_MIN))
    chart = report.chart(results, args.arrangements, args.out)
    if extras:
        print()
        print(gateway.text(results))
        if args.scenario == "gateway" and not args.smoke and not interrupted:
            written = gateway.write_results(results, args.results_dir, chart,
                                            report.table(results, args.arrangements), argv)
            print(f"\nwritten: {', '.join(written)}")
    print(f"\nresults: {os.path.join(args.out, 'results.json')}"
          + (f"; chart: {chart}" if chart else "; chart: not drawn (gnuplot missing or failed)"))
    failed = [r for sc in results["scenarios"] for r in sc["runs"] if r["failure"]]
    failed_extras = [f"{k}: {results[k]['error']}"
                     for k in ("spill_bench", "spill_bench_pinned", "idle")
                     if (results.get(k) or {}).get("error")]
    if interrupted:
        print(f"scenario: stopped early: {interrupted}", file=sys.stderr)
        return 1
    if failed or failed_extras:
        print(f"scenario: {len(failed) + len(failed_extras)} run(s) failed:", file=sys.stderr)
        for r in failed:
            print(f"  {r['scenario']}/{r['arrangement']}#{r['repetition']}: {r['failure']}",
                  file=sys.stderr)
        for e in failed_extras:
            print(f"  {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
