#!/usr/bin/env python3
"""The modules' arrows and doors, checked over the production sources (everything but tests/
and bench/, which may look inside any module):

- a module includes only the modules its arrows allow (DESIGN section 2: the session core
  depends on nothing, the engines on the core, control and queue on neither engine; the gateway
  puts them together);
- a module includes only another's door headers, never its internals;
- no `detail` namespace of one module is named in another's files.

`layering.py ROOT` checks the tree at ROOT; `layering.py --self-test` checks that each rule
fails on a tree made to break it."""
import os
import re
import subprocess
import sys
import tempfile

# What each module may include besides itself.
ARROWS = {
    "base": set(),
    "dataplane/session": {"base"},
    "dataplane/uring": {"base", "dataplane/session"},
    "dataplane/dpdk": {"base", "dataplane/session"},
    "queue": {"base", "dataplane/session"},
    "control": {"base", "dataplane/session", "queue"},
    "gateway": {"base", "dataplane/session", "dataplane/uring", "dataplane/dpdk", "queue",
                "control"},
    "tools/sluicectl": {"base", "dataplane/session", "control", "gateway"},
    "tools/sluice-load": {"base", "dataplane/session"},
}

# The headers other modules may include; a module not listed opens every header but those
# INTERNAL names.
DOORS = {
    "dataplane/uring": {"dataplane/uring/engine.h"},
    "dataplane/dpdk": {"dataplane/dpdk/dpdk.h"},
    "queue": {"queue/spill_log.h", "queue/spill_producer.h", "queue/drainer.h",
              "queue/recovery.h", "queue/format.h", "queue/spsc_ring.h"},
    "control": {"control/admin_api.h", "control/admin_client.h", "control/admin_server.h",
                "control/config.h", "control/control.h", "control/log.h", "control/router.h",
                "control/sessions_admin.h", "control/spill_admin.h"},
    "gateway": {"gateway/spill_auth.h"},
}
# Arrows that reach only some of a module's doors: control takes the rings between threads from
# queue (DESIGN section 2 puts them there), nothing of the spill log.
NARROW = {("control", "queue"): {"queue/spsc_ring.h"}}
INTERNAL = {"dataplane/session/text.h", "dataplane/session/frame_head.h"}
INTERNAL_NAME = re.compile(r"(_internal|_impl|detail)[^/]*\.h$")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DETAIL_DECL = re.compile(r"\bnamespace\s+([\w:]+)\s*\{")
DETAIL_USE = re.compile(r"\b(\w+)::detail::|\b(\w+_detail)::")


def module_of(path):
    parts = path.split("/")
    if parts[0] in ("dataplane", "tools") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else None


def sources(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard", "*.cc", "*.h"], capture_output=True,
                         text=True)
    if out.returncode == 0 and out.stdout.strip():
        files = out.stdout.split()
    else:  # not a git tree (the self-test's): walk it
        files = [os.path.relpath(os.path.join(d, f), root)
                 for d, _, names in os.walk(root) for f in names if f.endswith((".cc", ".h"))]
    return sorted(f for f in files
                  if module_of(f) in ARROWS and os.path.exists(os.path.join(root, f)))


def detail_owners(root, files):
    """The detail namespaces each module declares, by the name before `::detail` (or the
    `x_detail` name itself)."""
    owners = {}
    for f in files:
        text = open(os.path.join(root, f), encoding="utf-8").read()
        enclosing = None
        for m in DETAIL_DECL.finditer(text):
            name = m.group(1)
            parts = name.split("::")
            if parts[-1] == "detail":
                key = parts[-2] if len(parts) > 1 else enclosing
            elif parts[-1].endswith("_detail"):
                key = parts[-1]
            else:
                enclosing = parts[-1]
                continue
            if key:
                owners.setdefault(key, set()).add(module_of(f))
    return owners


def check(root):
    files = sources(root)
    owners = detail_owners(root, files)
    problems = []
    for f in files:
        mod = module_of(f)
        text = open(os.path.join(root, f), encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            target = module_of(inc)
            if target is None or target == mod or target not in ARROWS:
                continue
            if target not in ARROWS[mod]:
                problems.append(f"{f}: includes {inc}: {mod} may not depend on {target}")
            elif (mod, target) in NARROW and inc not in NARROW[(mod, target)]:
                problems.append(f"{f}: includes {inc}: {mod} takes only "
                                f"{', '.join(sorted(NARROW[(mod, target)]))} from {target}")
            elif inc in INTERNAL or INTERNAL_NAME.search(inc) or (
                    target in DOORS and inc not in DOORS[target]):
                doors = ", ".join(sorted(DOORS.get(target, []))) or "its headers"
                problems.append(f"{f}: includes {inc}, an internal header of {target} "
                                f"(its door: {doors})")
        for m in DETAIL_USE.finditer(text):
            key = m.group(1) or m.group(2)
            homes = owners.get(key)
            if homes and mod not in homes:
                problems.append(f"{f}: names {m.group(0)}, the detail namespace of "
                                f"{', '.join(sorted(homes))}")
    return files, problems


def self_test():
    cases = {
        "an arrow the design does not have": {
            "control/a.h": '#include "dataplane/uring/engine.h"\n'},
        "a door beyond a narrow arrow": {
            "control/a.cc": '#include "queue/spill_log.h"\n', "queue/spill_log.h": ""},
        "an internal header of another module": {
            "gateway/a.cc": '#include "queue/log_state.h"\n', "queue/log_state.h": ""},
        "a detail header of another module": {
            "gateway/a.cc": '#include "dataplane/session/parser_detail.h"\n',
            "dataplane/session/parser_detail.h": ""},
        "another module's detail namespace": {
            "dataplane/dpdk/engine/flow.h": "namespace sluice::dpdk::engine::detail {\n}\n",
            "gateway/a.cc": "int x = int(engine::detail::FlowState::kFree);\n"},
    }
    failed = 0
    for name, tree in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for path, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as out:
                    out.write(text)
            _, problems = check(root)
            if problems:
                print(f"self-test: {name}: found ({problems[0]})")
            else:
                print(f"self-test: {name}: NOT found")
                failed += 1
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files, problems = check(root)
    for p in problems:
        print(p)
    if not files:
        print(f"no production sources found under {root}")
        return 1
    print(f"{len(files)} production sources checked, {len(problems)} layering problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
