#!/usr/bin/env python3
"""YCSB-A-like mix on LMDB (python3-lmdb): 20,000 records of 1 KB, then 5,000 operations, half
reads, half updates, each update one durable write transaction. Usage: lmdb-ycsb.py DIR default|writemap
(OPS in the environment: operations instead of 5,000)."""
import lmdb, os, random, sys, time
path, writemap = sys.argv[1], sys.argv[2] == 'writemap'
n, ops = 20000, int(os.environ.get("OPS", "5000"))
os.makedirs(path, exist_ok=True)
env = lmdb.open(path, map_size=2 << 30, writemap=writemap)
val = b'v' * 1000
with env.begin(write=True) as t:
    for i in range(n):
        t.put(b'%08d' % i, val)
rnd = random.Random(1)
t0 = time.time()
for _ in range(ops):
    k = b'%08d' % rnd.randrange(n)
    if rnd.random() < 0.5:
        with env.begin() as t:
            t.get(k)
    else:
        with env.begin(write=True) as t:
            t.put(k, val)
dt = time.time() - t0
print('%s %d ops/s' % ('writemap' if writemap else 'default', ops / dt))
