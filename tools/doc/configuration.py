#!/usr/bin/env python3
"""doc/configuration.md from gateway/sluice.example.toml: every key of the example file (set or
shown commented out) with the comment above it, table by table.

    configuration.py EXAMPLE DOC           write DOC
    configuration.py --check EXAMPLE DOC   fail (exit 1) when DOC is not what EXAMPLE gives

The test command runs the check, so the document cannot miss a key the example documents."""
import re
import sys
import tomllib

INTRO = """\
# Configuration (`gateway/sluice.example.toml`)

`sluiced --config FILE` reads one TOML file. The example file documents every key with its
type, default and limits; it is loaded by a test so it cannot drift from the code, and this
document is made from it (`tools/doc/configuration.py`; the test command fails when the two
differ). Loading is strict: an unknown table or key, a wrong type or an impossible value is an
error that names the file, the line and the key, e.g.
`sluice.toml:12: nodes[1].weight: must be between 1 and 10000`. Every key is optional and takes
the default shown, except the `[[nodes]]` tables (at least one) and the name and address of each
node. Durations are in milliseconds (keys ending in `_ms`), sizes in bytes. Some keys can be
changed while the gateway runs (`sluicectl set`, a reload: [operations.md](operations.md)).
"""

TABLE = re.compile(r"^(?:#\s*)?(\[\[?[a-z_.]+\]\]?)\s*$")
KEY = re.compile(r"^(#\s*)?([a-z_]+) = (.+)$")


def is_value(key, value):
    try:
        tomllib.loads(f"{key} = {value}")
        return True
    except tomllib.TOMLDecodeError:
        return False


def split_paragraphs(lines):
    paragraphs, current = [], []
    for text in lines:
        if text:
            current.append(text)
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    return paragraphs


def render(example):
    out = [INTRO]
    table = None
    comment = []   # the comment lines above the next key
    group = None   # the keys sharing the comment above them: (keys, description)
    seen_table = False
    tables = set()
    repeat = False

    def flush():
        nonlocal group
        if group:
            keys, text = group
            names = ", ".join(f"**`{k}`** = `{v}`" for k, v in keys)
            out.append(f"- {names}" + (f": {text}" if text else ""))
        group = None

    def note(paragraphs):
        for p in paragraphs:
            out.append("")
            out.append(p)
            out.append("")

    for raw in example.splitlines():
        line = raw.rstrip()
        m = TABLE.match(line)
        if m:
            flush()
            table = m.group(1)
            seen_table = True
            comment = []
            repeat = table in tables  # a second [[nodes]]: its keys are the first one's
            tables.add(table)
            if not repeat:
                out.append("")
                out.append(f"## `{table}`")
                out.append("")
            continue
        if not seen_table or repeat:
            continue  # the file's own introduction (INTRO says it), or a table seen before
        k = KEY.match(line)
        if k and is_value(k.group(2), k.group(3)):
            name = table.strip("[]") + "." + k.group(2)
            value = k.group(3)
            # Paragraphs (split by a bare "#") before the key's own are notes on the table.
            paragraphs = [" ".join(p) for p in split_paragraphs(comment)]
            if paragraphs:
                flush()
                note(paragraphs[:-1])
                group = ([(name, value)], paragraphs[-1])
                if k.group(1):
                    group = (group[0], group[1] + " (shown commented out in the example)")
            elif group:
                group[0].append((name, value))
            else:
                group = ([(name, value)], "")
            comment = []
            continue
        if line.startswith("#"):
            # "# # text": the comment of a key shown commented out.
            comment.append(re.sub(r"^[#\s]*", "", line))
            continue
        if not line:
            flush()
            note(" ".join(p) for p in split_paragraphs(comment))
            comment = []
    flush()
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv):
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    example, doc = argv
    with open(example, encoding="utf-8") as f:
        text = render(f.read())
    if check:
        with open(doc, encoding="utf-8") as f:
            have = f.read()
        if have != text:
            print(f"{doc} is not what {example} gives: run tools/doc/configuration.py "
                  f"{example} {doc}", file=sys.stderr)
            return 1
        print(f"{doc}: every key of {example}")
        return 0
    with open(doc, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
