#!/bin/sh
# $1: a directory holding a nosefs binary. A fresh image with 20,000 files of 4 KiB (one
# embedded process), then a second process stats each twice: "stat_ns N again_ns M" (ns per
# stat, the first and the second of each file; no file is opened, so none has data state).
B=$1; IMG=/dev/shm/statb.img; AT=/tmp/statb
rm -f $IMG; $B/nosefs mkfs $IMG --size 1G >/dev/null
$B/nosefs run --image $IMG --at $AT -- python3 -c '
import os
d = "/tmp/statb/d"; os.mkdir(d)
for i in range(20000):
    with open(f"{d}/f{i}", "wb") as f: f.write(b"x" * 4096)
'
$B/nosefs run --image $IMG --at $AT -- python3 -c '
import os, time
d = "/tmp/statb/d"; names = [f"{d}/f{i}" for i in range(20000)]
t = time.perf_counter_ns()
for n in names: os.stat(n)
t1 = time.perf_counter_ns()
for n in names: os.stat(n)
t2 = time.perf_counter_ns()
print("stat_ns", (t1 - t) // len(names), "again_ns", (t2 - t1) // len(names))
'
rm -f $IMG
