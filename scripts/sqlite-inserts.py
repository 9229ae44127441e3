#!/usr/bin/env python3
"""SQLite autocommit inserts as an application makes them: 2,000 rows of 100 bytes into a fresh
database in DIR, journal_mode MODE (wal or delete), synchronous=full; prints the mean per insert.
docs/benchmarks.md ("A server thread polls ten times longer while its CPU would idle"):
nosefs run --at MNT -- /usr/bin/python3 scripts/sqlite-inserts.py MNT wal"""
import sqlite3, sys, time, os
d=sys.argv[1]; mode=sys.argv[2]
p=os.path.join(d,'t.db')
for s in ('','-wal','-shm','-journal'):
    try: os.unlink(p+s)
    except FileNotFoundError: pass
c=sqlite3.connect(p, isolation_level=None)
c.execute('pragma journal_mode=%s'%mode); c.execute('pragma synchronous=full')
c.execute('create table t(k integer primary key, v blob)')
n=2000; v=b'x'*100
t=time.perf_counter()
for i in range(n): c.execute('insert into t values(?,?)',(i,v))
dt=time.perf_counter()-t
print('%s %.1f us/insert'%(mode, dt/n*1e6))
