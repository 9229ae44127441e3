#!/usr/bin/env python3
"""Two builds alternated on one command: on a machine whose speed swings by half within minutes,
one run of each build says nothing; rounds of A then B (the order flipped every other round)
say which is faster how often, and by how much at the median.

    scripts/ab.py A_DIR B_DIR [--rounds N] [--pick REGEX]... -- COMMAND...

A_DIR and B_DIR are build directories (`target/release` of two checkouts: `git worktree add
/tmp/base HEAD~1`, then `CARGO_TARGET_DIR=/tmp/base/target cargo build --release -p nosefs-cli
-p nosefs-preload` there). In COMMAND, `{bin}` is replaced by the round's build directory (its
`nosefs`, with the shim beside it, runs its own daemon and clients). Each --pick is a regular
expression with one group, a number read from the command's output (stdout and stderr); the
default takes the last number of the last line. Higher or lower is not guessed: both medians
and the ratio B/A are printed, and how many rounds B's figure was the larger.

Example, a log commit as daemon clients (`{bin}` also mounts and unmounts):

    scripts/ab.py /tmp/base/target/release target/release --rounds 8 \\
      --pick 'per commit (\\d+) ns' -- sh -c 'rm -f /dev/shm/ab.img; mkdir -p /tmp/ab;
      {bin}/nosefs mkfs /dev/shm/ab.img --size 1G >/dev/null; {bin}/nosefs mount /dev/shm/ab.img /tmp/ab;
      {bin}/nosefs run --at /tmp/ab -- ./log-append /tmp/ab/f 100000; umount /tmp/ab'
"""
import argparse
import re
import statistics
import subprocess
import sys

LAST_NUMBER = r"(-?\d+(?:\.\d+)?)(?!.*\d)"


def figures(output, picks):
    """The numbers `picks` find in `output` (None where one finds nothing)."""
    if not picks:
        lines = [l for l in output.splitlines() if l.strip()]
        found = re.search(LAST_NUMBER, lines[-1]) if lines else None
        return [float(found.group(1)) if found else None]
    out = []
    for pick in picks:
        found = re.search(pick, output)
        out.append(float(found.group(1).replace(",", "")) if found else None)
    return out


def run(command, build):
    argv = [a.replace("{bin}", build) for a in command]
    done = subprocess.run(argv, capture_output=True, text=True)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        sys.exit(f"ab: {' '.join(argv)} exited with {done.returncode}:\n{output}")
    return output


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pick", action="append", default=[])
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("no command after --")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command:
        parser.error("no command after --")
    names = args.pick or ["last number"]
    rows = {"A": [], "B": []}
    for r in range(args.rounds):
        order = [("A", args.a), ("B", args.b)]
        if r % 2:
            order.reverse()
        got = {}
        for name, build in order:
            got[name] = figures(run(command, build), args.pick)
            rows[name].append(got[name])
        cells = "  ".join(
            f"{n}: {got['A'][k]} / {got['B'][k]}" for k, n in enumerate(names)
        )
        print(f"round {r + 1} ({'BA' if r % 2 else 'AB'}): {cells}", flush=True)
    print(f"\nA = {args.a}\nB = {args.b}")
    for k, n in enumerate(names):
        pairs = [
            (a[k], b[k])
            for a, b in zip(rows["A"], rows["B"])
            if a[k] is not None and b[k] is not None
        ]
        if not pairs:
            print(f"{n}: no figure found")
            continue
        med_a = statistics.median(a for a, _ in pairs)
        med_b = statistics.median(b for _, b in pairs)
        larger = sum(1 for a, b in pairs if b > a)
        ratio = med_b / med_a if med_a else float("nan")
        print(
            f"{n}: median A {med_a:g}, B {med_b:g}, B/A {ratio:.3f}; "
            f"B larger in {larger} of {len(pairs)} rounds"
        )


if __name__ == "__main__":
    main()
