#!/usr/bin/env python3
"""Writes "Where noseFS stands" from a main-job run: one table per workload, the targets side by
side with their ratios, the run's date, commit and machine. The section is regenerated from the
run's results.json files, never edited by hand.

    scripts/standing.py RESULTS_DIR               # print the section
    scripts/standing.py RESULTS_DIR --doc FILE    # replace it in FILE (docs/benchmarks.md)

RESULTS_DIR is what scripts/main-job.sh wrote: results.json (micro workloads), apps/results.json
(the programs themselves), report.md (the machine line) and commit (the commit it ran).
"""
import json
import os
import re
import sys

BEGIN = "<!-- standing:begin -->"
END = "<!-- standing:end -->"
FLOOR = "nosefs-floor"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return []


def first_line(path, prefix):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
    except FileNotFoundError:
        pass
    return "unknown"


def rate(v):
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def size(io):
    if not io:
        return ""
    for unit, n in (("M", 1 << 20), ("K", 1 << 10)):
        if io >= n and io % n == 0:
            return f" {io // n}{unit}"
    return f" {io}B"


def tables(records, heading):
    """Markdown tables, one per workload: a row per (op, variant, io size, threads), a column
    of ops/s per target, then each noseFS target's ratio to each other target."""
    out = []
    workloads = []
    for r in records:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    for w in workloads:
        rows = [r for r in records if r["workload"] == w]
        targets = []
        for r in rows:
            if r["target"] not in targets:
                targets.append(r["target"])
        ours = [t for t in targets if t.startswith("nosefs") and t != FLOOR]
        theirs = [t for t in targets if t not in ours and t != FLOOR]
        pairs = [(o, t) for o in ours for t in theirs]
        if FLOOR in targets:
            pairs += [(o, FLOOR) for o in ours]
        keys = []
        by = {}
        for r in rows:
            k = (r["op"], r["variant"], r["io_size"], r["threads"])
            if k not in by:
                keys.append(k)
                by[k] = {}
            by[k][r["target"]] = r["ops_per_sec"]
        out.append(f"{heading} {w}\n")
        head = ["op", "threads"] + targets + [f"{o} / {t}" for o, t in pairs]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|---:|" + "---:|" * (len(targets) + len(pairs)))
        for op, variant, io, threads in keys:
            got = by[(op, variant, io, threads)]
            name = op + size(io) + (f" ({variant})" if variant else "")
            cells = [name, str(threads)]
            cells += [rate(got[t]) if t in got else "-" for t in targets]
            cells += [ratio(got.get(o), got.get(t)) for o, t in pairs]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def section(results):
    micro = load(os.path.join(results, "results.json"))
    apps = load(os.path.join(results, "apps", "results.json"))
    commit = "unknown"
    try:
        with open(os.path.join(results, "commit")) as f:
            commit = f.read().strip()
    except FileNotFoundError:
        pass
    machine = first_line(os.path.join(results, "report.md"), "Machine: ").rstrip(".")
    run = os.path.basename(os.path.normpath(results))
    lines = [
        BEGIN,
        "## Where noseFS stands",
        "",
        f"Written by `scripts/standing.py` from the main job's run `{run}` (commit {commit}; "
        f"{machine}); `./scripts/main-job.sh` regenerates it. Rates in operations per second,",
        "higher is better; ratios are the noseFS target's rate over the other target's, from the",
        "same run (a ratio to `nosefs-floor` below 1 is how far the implementation is from what",
        "its own stores, write-backs and fences cost). tmpfs does not sync; ext4 sits on a",
        "ramdisk. The dated history below keeps the commands and the reasons.",
        "",
    ]
    if micro:
        lines.append("Micro workloads (`--workload dirops fileops mmap fragment`, default targets):")
        lines.append("")
        lines += tables(micro, "###")
    if apps:
        lines.append("What one call costs (`--workload calls`: a call that does nothing, then fstat, stat")
        lines.append("and open+close of a file), then the programs themselves (`--workload sqlite redis kv")
        lines.append("rocksdb oltp tools`); one thread; `nosefs-client`: daemon clients of `nosefs mount`,")
        lines.append("`nosefs-preload`: embedded:")
        lines.append("")
        lines += tables(apps, "###")
    if not micro and not apps:
        lines.append("(no results found)")
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def splice(doc, text):
    with open(doc) as f:
        old = f.read()
    if BEGIN in old and END in old:
        new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END) + "\n?", lambda _: text, old,
                     count=1, flags=re.S)
    else:
        # After the title and the opening paragraph: before the first "## ".
        at = old.find("\n## ")
        at = len(old) if at < 0 else at + 1
        new = old[:at] + text + "\n" + old[at:]
    with open(doc, "w") as f:
        f.write(new)


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--doc"):
        sys.exit(__doc__)
    text = section(argv[1])
    if len(argv) == 4:
        splice(argv[3], text)
        print(f"standing: {argv[3]} updated from {argv[1]}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv)
