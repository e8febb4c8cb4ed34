"""The harness's output: figures per run, medians and ratios, the table, the tool check, chart."""

import os
import shutil
import statistics
import subprocess

FIGURES = ("msg_s", "mib_s", "sessions_s", "p50_us", "p99_us")
LABELS = {"msg_s": "msg/s", "mib_s": "MiB/s", "sessions_s": "sessions/s"}


def figures(summary, spec):
    """The few numbers the table and chart use, from one sluice-load JSON summary."""
    lat = summary.get("latency_us", {})
    kind = spec["latency"]
    if not lat.get(kind, {}).get("count"):
        kind = "receipt"
    chosen = lat.get(kind, {})
    return {
        "msg_s": summary.get("throughput_msg_s"),
        "mib_s": summary.get("throughput_mib_s"),
        "sessions_s": summary.get("session_rate_s"),
        "p50_us": chosen.get("p50"),
        "p99_us": chosen.get("p99"),
        "latency_kind": kind,
    }


def run_line(run):
    head = f"  {run['arrangement']:<8} #{run['repetition']}"
    if run["failure"]:
        f = run.get("figures")
        measured = ("" if not f or f["msg_s"] is None else
                    f" (measured, not counted: {f['msg_s']:.0f} msg/s, p99 "
                    f"{f['p99_us'] or 0:.0f} us)")
        return f"{head} FAILED: {run['failure']}{measured}"
    f = run["figures"]
    cores = run["cpu_cores"]
    return (f"{head} {f['msg_s']:>10.0f} msg/s {f['mib_s']:>8.1f} MiB/s "
            f"{f['sessions_s']:>7.0f} sessions/s  p50 {f['p50_us']:>7.0f} us "
            f"p99 {f['p99_us']:>7.0f} us  cores: "
            + " ".join(f"{k}={v:.2f}" for k, v in cores.items() if v is not None)
            + "  waiting for a CPU: "
            + " ".join(f"{k}={v:.2f}" for k, v in run["cpu_wait"].items() if v is not None)
            + f"  load {run['loadavg'][0]:.1f}")


def medians_and_ratios(scenario, arrangements):
    medians = {}
    for arr in arrangements:
        ok = [r for r in scenario["runs"] if r["arrangement"] == arr and not r["failure"]]
        m = {"runs_ok": len(ok),
             "runs_failed": sum(1 for r in scenario["runs"]
                                if r["arrangement"] == arr and r["failure"])}
        for key in FIGURES:
            vals = [r["figures"][key] for r in ok if r["figures"][key] is not None]
            m[key] = statistics.median(vals) if vals else None
            m[key + "_min"] = min(vals) if vals else None
            m[key + "_max"] = max(vals) if vals else None
        cores = [r["cpu_cores"]["sluice-load"] for r in ok]
        m["sluice_load_cores"] = statistics.median(cores) if cores else None
        waits = [r["cpu_wait"]["sluice-load"] for r in ok
                 if r["cpu_wait"]["sluice-load"] is not None]
        m["sluice_load_cpu_wait"] = statistics.median(waits) if waits else None
        medians[arr] = m
    ref = arrangements[0]
    ratios = {}
    for arr in arrangements[1:]:
        ratios[arr] = {key: _ratio(medians[arr][key], medians[ref][key]) for key in FIGURES}
    return medians, ratios


def _ratio(a, b):
    return None if a is None or not b else round(a / b, 3)


def _fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def table(results, arrangements):
    ref = arrangements[0]
    lines = [f"{'scenario':<9} {'arrangement':<11} {'msg/s':>10} {'MiB/s':>8} "
             f"{'sessions/s':>10} {'p50 us':>8} {'p99 us':>8} {'load cores':>10} "
             f"{'ratio lead':>11} {'ratio p99':>9}  runs"]
    for sc in results["scenarios"]:
        for arr in sc.get("arrangements", arrangements):
            m = sc["medians"][arr]
            r = sc["ratios"].get(arr)
            lead = "" if r is None else _fmt(r[sc["lead"]], 2)
            p99 = "" if r is None else _fmt(r["p99_us"], 2)
            sessions = m["sessions_s"] if sc["lead"] == "sessions_s" else None
            lines.append(
                f"{sc['scenario']:<9} {arr:<11} {_fmt(m['msg_s']):>10} {_fmt(m['mib_s'], 1):>8} "
                f"{_fmt(sessions):>10} {_fmt(m['p50_us']):>8} {_fmt(m['p99_us']):>8} "
                f"{_fmt(m['sluice_load_cores'], 2):>10} {lead:>11} {p99:>9}  "
                f"{m['runs_ok']} ok" + (f", {m['runs_failed']} FAILED" if m["runs_failed"] else ""))
    lines.append(f"medians over the runs; ratios: arrangement / {ref} (lead figure: msg/s for "
                 "small, latency and spill, MiB/s for bulk, sessions/s for sessions and connect)"
                 "; latency: receipt for small, sessions, connect and spill, delivery for bulk "
                 "and latency; load cores: CPU of sluice-load / wall time")
    return "\n".join(lines)


def tool_check(results, ratio_min):
    """Issue 5: one core of sluice-load drives >= 1.5x the small-message rate HAProxy forwards."""
    sc = next((s for s in results["scenarios"] if s["scenario"] == "small"), None)
    if sc is None or "direct" not in sc["medians"] or "haproxy" not in sc["medians"]:
        return None
    direct = sc["medians"]["direct"]["msg_s"]
    haproxy = sc["medians"]["haproxy"]["msg_s"]
    ratio = _ratio(direct, haproxy)
    pairs = []
    for rep in range(results["settings"]["repeat"]):
        d = [r for r in sc["runs"] if r["repetition"] == rep and r["arrangement"] == "direct"
             and not r["failure"]]
        h = [r for r in sc["runs"] if r["repetition"] == rep and r["arrangement"] == "haproxy"
             and not r["failure"]]
        if d and h:
            pairs.append(_ratio(d[0]["figures"]["msg_s"], h[0]["figures"]["msg_s"]))
    # The same question with the CPU each process got: messages per CPU-second of sluice-load
    # (direct runs) against messages per CPU-second of HAProxy (haproxy runs). On a shared
    # machine the raw rates measure the scheduler as much as the programs; this does not, but
    # loopback TCP receive work is charged to the sender, so it is indicative only.
    def per_cpu_s(arr, proc):
        vals = [r["summary"]["acknowledged"] / r["cpu_s"][proc] for r in sc["runs"]
                if r["arrangement"] == arr and not r["failure"] and r["cpu_s"].get(proc)]
        return statistics.median(vals) if vals else None
    load_per_cpu = per_cpu_s("direct", "sluice-load")
    haproxy_per_cpu = per_cpu_s("haproxy", "haproxy")
    sink_per_cpu = per_cpu_s("haproxy", "sink")
    # A model, not a measurement: what one whole core shared by the sink and HAProxy would
    # forward at those costs, against one whole core of sluice-load.
    shared_core = (None if not haproxy_per_cpu or not sink_per_cpu
                   else 1 / (1 / haproxy_per_cpu + 1 / sink_per_cpu))
    return {
        "sink_msg_per_cpu_s": sink_per_cpu,
        "model_one_core_sink_and_haproxy_msg_s": shared_core,
        "model_ratio": _ratio(load_per_cpu, shared_core),
        "sluice_load_msg_per_cpu_s": load_per_cpu,
        "haproxy_msg_per_cpu_s": haproxy_per_cpu,
        "cpu_normalised_ratio": _ratio(load_per_cpu, haproxy_per_cpu),
        "sluice_load_one_core_direct_msg_s": direct,
        "haproxy_forwarded_msg_s": haproxy,
        "ratio": ratio,
        "ratio_per_repetition": pairs,
        "sluice_load_cpu": results["settings"]["load_cpu"],
        "sluice_load_cores_direct": sc["medians"]["direct"]["sluice_load_cores"],
        "sluice_load_cpu_wait_direct": sc["medians"]["direct"]["sluice_load_cpu_wait"],
        "ratio_min": ratio_min,
        "met": ratio is not None and ratio >= ratio_min,
    }


def tool_check_text(check, ratio_min):
    if check is None:
        return "tool check: not run (needs the small scenario with direct and haproxy)"
    pinned = (f"pinned to CPU {check['sluice_load_cpu']}" if check["sluice_load_cpu"] is not None
              else "NOT pinned (--no-pin or one CPU): the check needs one core")
    return (f"tool check (small messages, sluice-load {pinned}, "
            f"used {_fmt(check['sluice_load_cores_direct'], 2)} of a core direct, waited for "
            f"a CPU {_fmt(check['sluice_load_cpu_wait_direct'], 2)} of the time): "
            f"direct {_fmt(check['sluice_load_one_core_direct_msg_s'])} msg/s, "
            f"HAProxy forwards {_fmt(check['haproxy_forwarded_msg_s'])} msg/s, "
            f"ratio {_fmt(check['ratio'], 2)} (per repetition: "
            f"{', '.join(_fmt(x, 2) for x in check['ratio_per_repetition'])}); "
            f"needs >= {ratio_min}: " + ("met" if check["met"] and check["sluice_load_cpu"]
                                         is not None else "NOT met")
            + f"\n  per CPU-second (indicative: loopback receive work is charged to the "
            f"sender): sluice-load {_fmt(check['sluice_load_msg_per_cpu_s'])} msg, HAProxy "
            f"{_fmt(check['haproxy_msg_per_cpu_s'])} msg, ratio "
            f"{_fmt(check['cpu_normalised_ratio'], 2)}; sink {_fmt(check['sink_msg_per_cpu_s'])}"
            f" msg; model of whole cores (sluice-load alone vs sink + HAProxy sharing one): "
            f"ratio {_fmt(check['model_ratio'], 2)}")


def chart(results, arrangements, out_dir):
    """chart.png: per scenario, the lead throughput and p99 latency of each arrangement
    (median, with min-max bars). Returns its path, or None if gnuplot is missing or fails."""
    gnuplot = shutil.which("gnuplot")
    scenarios = [s for s in results["scenarios"] if s["runs"]]
    if gnuplot is None or not scenarios:
        return None
    data_dir = os.path.join(out_dir, "chart-data")
    os.makedirs(data_dir, exist_ok=True)
    png = os.path.join(out_dir, "chart.png")
    cols = len(scenarios)
    script = [f"set terminal pngcairo size {max(2, cols) * 330},640 font ',9'",
              f"set output '{png}'",
              f"set multiplot layout 2,{cols} title 'sluice-load against the sink: "
              f"{', '.join(arrangements)} (median, min-max over "
              f"{results['settings']['repeat']} runs; {results['started_at']})'",
              "set style fill solid 0.6 border -1", "set boxwidth 0.6", "set yrange [0:*]",
              "unset key",
              "set grid ytics", "set offsets 0, 0, graph 0.08, 0", "set format y '%.1s%c'"]
    for row, (key, unit) in enumerate((("lead", None), ("p99_us", "p99 latency (us)"))):
        for sc in scenarios:
            fig = sc["lead"] if key == "lead" else key
            path = os.path.join(data_dir, f"{sc['scenario']}-{fig}.dat")
            arrs = sc.get("arrangements", arrangements)
            empty = True
            with open(path, "w") as f:
                for i, arr in enumerate(arrs):
                    m = sc["medians"][arr]
                    vals = [m[fig], m[fig + "_min"], m[fig + "_max"]]
                    if any(v is None for v in vals):
                        vals = [0] * 3  # no run passed: an empty bar, said in the title
                    else:
                        empty = False
                    f.write(f"{i} {arr} {vals[0]} {vals[1]} {vals[2]}\n")
            title = (f"{sc['scenario']}: {LABELS[fig]}" if row == 0
                     else f"{sc['scenario']}: {unit}, {sc['latency_kind']}")
            title += " (no run passed)" if empty else ""
            script += [f"set title '{title}'", "set xrange [-0.6:%f]" % (len(arrs) - 0.4),
                       f"plot '{path}' using 1:3:xtic(2) with boxes lc rgb '#4477aa', "
                       f"'' using 1:3:4:5 with yerrorbars lc rgb 'black' pt -1"]
    script.append("unset multiplot")
    with open(os.path.join(data_dir, "chart.gp"), "w") as f:
        f.write("\n".join(script) + "\n")
    try:
        subprocess.run([gnuplot, os.path.join(data_dir, "chart.gp")], check=True,
                       capture_output=True, timeout=60)
    except (subprocess.SubprocessError, OSError):
        return None
    return png
