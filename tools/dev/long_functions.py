#!/usr/bin/env python3
"""The longest functions of the production C++ (everything but tests/ and bench/), as
clang-format lays them out: a definition starts at column 0 and ends at the first `}` in column
0 after it. Lambdas and class-body methods count within their enclosing definition.

    long_functions.py [--top N] [--max LINES]

Prints the N longest (default 5); with --max, exits 1 when any is longer than LINES."""
import re
import subprocess
import sys

NOT_FUNCTION = re.compile(r"^(?:(?:namespace|struct|class|union|enum|extern|typedef|using)\b|#|/[/*]| \*)")


def definitions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line and not line[0].isspace() and not NOT_FUNCTION.match(line) and line != "}" \
                and not line.startswith("}") and "(" in line:
            # The signature runs until a line ending in "{" (a definition) or ";" (a declaration).
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{") and \
                    not lines[j].rstrip().endswith("= {"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                name = re.sub(r"\s+", " ", line.split("(")[0]).strip().split(" ")[-1]
                yield k - i + 1, name, i + 1
                i = k + 1
                continue
        i += 1


def main(argv):
    top, limit = 5, None
    args = iter(argv)
    for a in args:
        if a == "--top":
            top = int(next(args))
        elif a == "--max":
            limit = int(next(args))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    files = subprocess.run(["git", "ls-files", "*.cc", "*.h"], capture_output=True, text=True,
                           check=True).stdout.split()
    found = []
    for f in files:
        if f.startswith(("tests/", "bench/")):
            continue
        for n, name, line in definitions(f):
            found.append((n, f"{f}:{line}", name))
    found.sort(reverse=True)
    for n, where, name in found[:top]:
        print(f"{n:5d} lines  {name}  {where}")
    if limit is not None:
        over = [x for x in found if x[0] > limit]
        if over:
            print(f"{len(over)} functions over {limit} lines", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
