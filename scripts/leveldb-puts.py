#!/usr/bin/env python3
"""LevelDB's synced puts, one at a time (issue 39): 2,000 keys of 1,000-byte values, then N
puts with sync=True of random keys; prints the mean latency of each block of 500 puts (the
blocks with LevelDB's compactions stand out), the p50, p90 and mean, and how much of the time
went to puts slower than 30 us and 200 us. Needs python3-plyvel (/usr/bin/python3 here).

Usage: nosefs run --at MNT -- /usr/bin/python3 scripts/leveldb-puts.py MNT/db 20000
"""
import plyvel, sys, time, random
path, n = sys.argv[1], int(sys.argv[2])
db = plyvel.DB(path, create_if_missing=True)
v = b'x' * 1000
for k in range(2000):
    db.put(b'user%08d' % k, v)
rnd = random.Random(1)
lat = []
for i in range(n):
    k = b'user%08d' % rnd.randrange(2000)
    t0 = time.perf_counter_ns()
    db.put(k, v, sync=True)
    lat.append(time.perf_counter_ns() - t0)
db.close()
blocks = [lat[i:i + 500] for i in range(0, n, 500)]
print(' '.join(f"{sum(b) / len(b) / 1000:.0f}" for b in blocks))
s = sorted(lat)
print("p50", s[n//2]/1000, "p90", s[n*9//10]/1000, "mean", sum(lat)/n/1000)
big = [x for x in lat if x > 200000]
print("over 200us:", len(big), "sum ms", sum(big)/1e6, "max us", max(lat)/1000)
mid = [x for x in lat if 30000 < x <= 200000]
print("30-200us:", len(mid), "sum ms", sum(mid)/1e6, " total ms", sum(lat)/1e6)
