"""Issue 6 acceptance: the spill log's own benchmark as reference, memory per idle session, the
acceptance table (reference, ours, ratio, target, met?) and the files under bench/results/."""

import datetime
import os
import re
import shlex
import shutil
import statistics
import subprocess

import idle_sessions
from scenarios import report
from scenarios.arrangements import pinned

SPILL_BENCH_TIMEOUT_S = 600
# "spill [4 workers x 64 sessions, ...]: 123 durable records, 45678 records/s, ..."
SPILL_LINE = re.compile(r"^spill \[(?P<shape>[^\]]*)\]: (?P<records>\d+) durable records, "
                        r"(?P<rate>[\d.]+) records/s", re.M)


def spill_reference(spill_bench, smoke, out_dir, cpus=None):
    """Runs spill_bench (--full, or its short mode under --smoke) on the file system of
    out_dir, where sluiced's spill log was, and returns its durable records/s. With `cpus`, it
    runs under `taskset -c cpus`: the CPU sluiced had in the spill scenario."""
    if spill_bench is None:
        return {"skipped": "spill_bench not built (meson -Dbenchmarks=enabled)"}
    cmd = pinned([spill_bench, f"--dir={out_dir}"] + ([] if smoke else ["--full"]), cpus)
    log = os.path.join(out_dir, "spill_bench" + ("" if cpus is None else "-pinned") + ".log")
    print(f"\n== spill log reference: {' '.join(cmd)}", flush=True)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=SPILL_BENCH_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        return {"command": cmd, "error": f"spill_bench: {e}"}
    with open(log, "w") as f:
        f.write(out.stdout + out.stderr)
    m = SPILL_LINE.search(out.stdout)
    if out.returncode not in (0, 1) or m is None:  # 1: one of its own targets missed
        return {"command": cmd, "error": f"spill_bench exited {out.returncode} without its "
                f"'spill [...]' line (see {log})"}
    print(m.group(0), flush=True)
    return {"command": cmd, "cpus": cpus, "exit_code": out.returncode, "line": m.group(0),
            "shape": m.group("shape"), "records_s": float(m.group("rate")),
            "output": out.stdout}


def idle(args, procs):
    """Memory per idle spliced session (bench/idle_sessions.py) with the arrangements here
    (not the bulk floor's relay: it is no gateway)."""
    arrangements = [a for a in args.arrangements if a != "relay"]
    ns, why = idle_sessions.plan(args.idle_sessions, arrangements)
    rounds = 1 if args.smoke else 2
    print(f"\n== idle: memory per idle session, N = "
          + ", ".join(f"{name} {n:,}" for name, n in ns.items())
          + "".join(f" ({name}: {text})" for name, text in why.items()), flush=True)
    try:
        result = idle_sessions.run(arrangements, ns, rounds, args.sluice_load, procs,
                                   os.path.join(args.out, "idle"))
    except RuntimeError as e:
        return {"error": f"idle sessions: {e}", "sessions": ns.get("sluiced", ns["direct"])}
    result["requested"] = args.idle_sessions
    result["why_fewer"] = why
    result["text"] = idle_sessions.text(result, args.idle_sessions, why)
    return result


def _median_of(sc, arr, get):
    vals = [get(r) for r in sc["runs"] if r["arrangement"] == arr and not r["failure"]]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _failures(sc, arr):
    return [r["failure"] for r in sc["runs"] if r["arrangement"] == arr and r["failure"]]


def acceptance(results):
    """Rows: what, unit, reference name and figure, ours, ratio, target, met (None: no data)."""
    by = {sc["scenario"]: sc for sc in results["scenarios"]}
    rows = []

    def row(what, unit, ref_name, ref, ours, target_op, target, note=None):
        ratio = None if ref in (None, 0) or ours is None else ours / ref
        met = None if ratio is None else (ratio >= target if target_op == ">=" else
                                          ratio <= target)
        rows.append({"what": what, "unit": unit, "reference": ref_name, "reference_value": ref,
                     "ours": ours, "ratio": ratio, "target": f"{target_op} {target}",
                     "met": met, "note": note})

    def lead(name, arr, key):
        sc = by.get(name)
        if sc is None or arr not in sc["medians"]:
            return None, f"{name} not run"
        fails = _failures(sc, arr) if arr == "sluiced" else []
        return sc["medians"][arr][key], (f"sluiced runs failed: {fails[0]}" if fails else None)

    def note_of(*notes):
        return "; ".join(n for n in notes if n) or None

    d, nd = lead("bulk", "direct", "mib_s")
    h, nh = lead("bulk", "haproxy", "mib_s")
    s, ns = lead("bulk", "sluiced", "mib_s")
    row("bulk throughput", "MiB/s", "direct", d, s, ">=", 0.8, note_of(nd, ns))
    row("bulk throughput", "MiB/s", "HAProxy", h, s, ">=", 1.5, note_of(nh, ns))
    h, nh = lead("connect", "haproxy", "sessions_s")
    s, ns = lead("connect", "sluiced", "sessions_s")
    row("new-session rate", "sessions/s", "HAProxy", h, s, ">=", 1.2,
        note_of(nh, ns))
    sc = by.get("latency")
    if sc is not None and "haproxy" in sc["arrangements"] and "sluiced" in sc["arrangements"]:
        def p99(r):
            return r["summary"]["latency_us"]["receipt"].get("p99") if r["summary"] else None
        h, s = _median_of(sc, "haproxy", p99), _median_of(sc, "sluiced", p99)
        fails = _failures(sc, "sluiced")
        row("p99 SEND->RECEIPT, 20k msg/s", "us", "HAProxy", h, s, "<=", 1.0,
            f"sluiced runs failed: {fails[0]}" if fails else None)
    else:
        row("p99 SEND->RECEIPT, 20k msg/s", "us", "HAProxy", None, None, "<=", 1.0,
            "latency not run")
    s, ns = lead("spill", "sluiced", "msg_s")
    if s is None and by.get("spill"):
        # every run failed: show what they measured, marked, never as a pass
        failed = [r["figures"]["msg_s"] for r in by["spill"]["runs"]
                  if r["figures"] and r["figures"]["msg_s"]]
        if failed:
            ns = note_of(ns, f"figure from FAILED runs, median {statistics.median(failed):,.0f}"
                             " receipts/s (not counted)")
    sp = results.get("spill_bench") or {}
    row("spill durable receipts", "msg/s", "spill_bench", sp.get("records_s"), s, ">=", 0.7,
        note_of(ns, sp.get("error") or sp.get("skipped"),
                f"spill_bench as it runs: unpinned, {sp.get('shape')}" if sp.get("shape")
                else None))
    spp = results.get("spill_bench_pinned")
    if spp:
        row("spill receipts, same CPU", "msg/s", "spill_bench", spp.get("records_s"), s, ">=", 0.7,
            note_of(ns, spp.get("error"), f"spill_bench on CPU {spp.get('cpus')} only, "
                    "as sluiced"))
    idl = results.get("idle") or {}
    summ = (idl.get("summary") or {}).get("sluiced")
    ours = None if summ is None else summ["per_session_kib"]
    hap = (idl.get("summary") or {}).get("haproxy")
    # A kernel figure below zero can only be other work on the machine freeing memory meanwhile:
    # no data, not a pass.
    noisy = summ is not None and summ["kernel_per_session_kib"] <= 0
    rows.append({"what": f"idle spliced session, N={idl.get('sessions', 0):,}",
                 "unit": "KiB", "reference": "target", "reference_value": 16.0, "ours": ours,
                 "ratio": None if ours is None else ours / 16.0, "target": "<= 16 KiB",
                 "met": None if ours is None or noisy else ours <= 16.0,
                 "note": note_of(idl.get("error"),
                                 "kernel figure <= 0: noise, measure again" if noisy else None,
                                 None if hap is None else
                                 f"HAProxy {hap['per_session_kib']:.1f} KiB at "
                                 f"N={hap['sessions']:,}",
                                 None if "sluiced" not in (idl.get("why_fewer") or {}) else
                                 f"N < {idl.get('requested', 0):,}: fd limit")})
    return rows


def relay_floor(results):
    """The bulk floor line: bench/splice_relay (blocking splice(2), a thread per direction,
    nothing else) placed as the proxies are, against direct, in the same run: the most that
    any proxy splicing on these cores can expect. None when bulk did not run it."""
    sc = next((sc for sc in results["scenarios"] if sc["scenario"] == "bulk"), None)
    if sc is None or "relay" not in sc.get("medians", {}) or "direct" not in sc["medians"]:
        return None
    d, r = sc["medians"]["direct"]["mib_s"], sc["medians"]["relay"]["mib_s"]
    if not d or r is None:
        return None
    s = (sc["medians"].get("sluiced") or {}).get("mib_s")
    return (f"bulk floor: splice_relay (blocking splice(2), no gateway work, placed as the "
            f"proxies) {r:,.1f} / direct {d:,.1f} MiB/s = {r / d:.2f}"
            + ("" if s is None else f"; sluiced / splice_relay {s / r:.2f}"))


def _f(v, unit):
    if v is None:
        return "-"
    return f"{v:,.1f}" if unit in ("MiB/s", "KiB") else f"{v:,.0f}"


def text(results):
    rows = results.get("acceptance") or []
    lines = [f"{'acceptance (issue 6)':<40} {'reference':<14} {'reference':>10} {'sluiced':>10} "
             f"{'ratio':>6} {'target':>9}  met?"]
    for r in rows:
        ref_name = r["reference"].split(" ")[0]
        met = "no data" if r["met"] is None else ("met" if r["met"] else "NOT met")
        lines.append(f"{r['what'] + ' (' + r['unit'] + ')':<40} {ref_name:<14} "
                     f"{_f(r['reference_value'], r['unit']):>10} {_f(r['ours'], r['unit']):>10} "
                     f"{'-' if r['ratio'] is None else format(r['ratio'], '.2f'):>6} "
                     f"{r['target']:>9}  {met}" + (f"  ({r['note']})" if r["note"] else ""))
    lines.append("ratio: sluiced / reference (memory: / 16 KiB); medians over the runs; "
                 "sluiced and HAProxy have the same number of worker threads")
    floor = relay_floor(results)
    if floor:
        lines.append(floor)
    for key in ("spill_bench", "spill_bench_pinned"):
        sp = results.get(key) or {}
        if sp.get("line"):
            lines.append(f"spill log reference ({' '.join(sp['command'])}): {sp['line']}")
    idl = results.get("idle") or {}
    if idl.get("text"):
        lines.append(idl["text"])
    return "\n".join(lines)


def write_results(results, results_dir, chart, table, argv):
    """bench/results/gateway-DATE.md (tables, command, machine) and gateway-DATE.png."""
    os.makedirs(results_dir, exist_ok=True)
    stamp = datetime.datetime.fromisoformat(results["started_at"]).strftime("%Y%m%d-%H%M")
    md = os.path.join(results_dir, f"gateway-{stamp}.md")
    written = [md]
    png = None
    if chart:
        png = os.path.join(results_dir, f"gateway-{stamp}.png")
        shutil.copyfile(chart, png)
        written.append(png)
    m = results["machine"]
    cmd = "bench/scenario.py " + " ".join(shlex.quote(a) for a in argv)
    body = [f"# Gateway benchmark, {results['started_at']} to {results['finished_at']}", "",
            "Produced by (from the repository root):", "", "```sh", cmd, "```", "",
            f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), kernel {m['kernel']}, "
            f"{m['haproxy']}; HEAD {m['commit']} (the binaries are built from the working tree, "
            "which may differ from it); load average "
            f"{' '.join(map(str, results['loadavg_start']))} at the start, "
            f"{' '.join(map(str, results['loadavg_end']))} at the end. "
            f"{results['settings']['repeat']} repetitions of {results['settings']['seconds']:g} s "
            "per arrangement, interleaved. The machine is shared: absolute figures drift, the "
            "ratios measured in the same command are the figures to quote.", "",
            "## Acceptance", "", "```", text(results), "```", "",
            "## Every scenario", "", "```", table, "```", ""]
    if png:
        body += [f"![chart](gateway-{stamp}.png)", ""]
    body += ["## Every run", "",
             "In the order run: figures, the share of a core each process used and the share "
             "of the run it waited for a CPU, the 1-minute load average.", "", "```"]
    body += [f"{sc['scenario']:<8}" + report.run_line(r) for sc in results["scenarios"]
             for r in sc["runs"]]
    body += ["```", ""]
    failed = [r for sc in results["scenarios"] for r in sc["runs"] if r["failure"]]
    extras = [f"{k}: {results[k]['error']}" for k in ("spill_bench", "spill_bench_pinned", "idle")
              if (results.get(k) or {}).get("error")]
    if failed or extras or results.get("interrupted"):
        body += ["## Failures (the command exited 1)", ""]
        body += [f"- {r['scenario']}/{r['arrangement']}#{r['repetition']}: {r['failure']}"
                 for r in failed] + [f"- {e}" for e in extras]
        if results.get("interrupted"):
            body.append(f"- stopped early: {results['interrupted']}")
        body.append("")
    body += ["Every command as run, per-process CPU figures and each sluice-load JSON summary "
             "are in the run's results.json (in `--out`, not committed).", ""]
    with open(md, "w") as f:
        f.write("\n".join(body))
    return written
