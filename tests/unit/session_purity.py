#!/usr/bin/env python3
"""The session core performs no I/O and reads no clock: every external symbol its library
uses must be on this list (memory and string primitives, allocation at construction, and the
assertion failure path). A call to read, write, send, clock_gettime, time... fails the test."""
import re
import subprocess
import sys

ALLOWED = {
    "memchr", "memcmp", "memcpy", "memmove", "memset", "strlen",
    "operator new(unsigned long)", "operator new[](unsigned long)",
    "operator delete(void*)", "operator delete[](void*)",
    "operator delete(void*, unsigned long)", "operator delete[](void*, unsigned long)",
    "_Unwind_Resume", "__gxx_personality_v0", "_GLOBAL_OFFSET_TABLE_",
    # CPU feature detection that picks the parser's vector width once at start.
    "__cpu_model", "__cpu_indicator_init",
    # SLUICE_ASSERT's failure path: print and abort (programmer errors only).
    "abort", "fprintf", "stderr",
}
ALLOWED_PREFIXES = ("sluice::", "std::__throw_", "vtable for __cxxabiv1::",
                    "__asan_", "__ubsan_", "__sanitizer_",
                    "__stack_chk_fail")

def main() -> int:
    lib = sys.argv[1]
    out = subprocess.run(["nm", "-C", "--undefined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    symbols = set()
    for line in out.splitlines():
        m = re.match(r"^\s+U (.+)$", line)
        if m:
            symbols.add(m.group(1))
    bad = sorted(s for s in symbols
                 if s not in ALLOWED and not s.startswith(ALLOWED_PREFIXES))
    if not symbols:
        print(f"no undefined symbols read from {lib}: nm output unexpected")
        return 1
    for s in bad:
        print(f"dataplane/session uses {s}: the core must not do I/O or read clocks")
    print(f"{len(symbols)} external symbols checked, {len(bad)} not allowed")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
