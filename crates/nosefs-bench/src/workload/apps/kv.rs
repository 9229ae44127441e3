//! `kv`: YCSB's core workloads A-F on two kinds of store: LMDB, a B+tree in a memory-mapped file
//! like seed 000's MongoDB engine, in its default mode (reads from a read-only mapping, writes
//! with pwrite and fdatasync: variant `lmdb`) and with `writemap` (stores into a writable
//! mapping of the whole map size, synced with msync: variant `lmdb-writemap`); and LevelDB, the
//! LSM store the published user-space PM file systems measure YCSB on (Debian's python3-plyvel),
//! every write synced to its log (variant `leveldb`).

use std::io;

use super::{measured, path_arg, run_driver, Measured, Place};

/// The YCSB driver: a load of `records` in one transaction (one synced batch on LevelDB), then
/// `n` operations of each core workload, every write its own durable transaction; then the
/// store is reopened and every key's value checked. The third argument names the store:
/// `default` or `writemap` (LMDB), `leveldb`.
const KV_DRIVER: &str = r#"
import bisect, json, random, sys, time
path, n, store = sys.argv[1], int(sys.argv[2]), sys.argv[3]
records = 10000
class Lmdb:
    def __init__(self, readonly=False):
        import lmdb
        self.env = lmdb.open(path, map_size=1 << 30, writemap=store == 'writemap', readonly=readonly)
    def get(self, k):
        with self.env.begin() as t:
            return t.get(k)
    def put(self, k, v, check=None):
        with self.env.begin(write=True) as t:
            if check is not None:
                assert t.get(k) == check
            t.put(k, v)
    def load(self, items):
        with self.env.begin(write=True) as t:
            for k, v in items:
                t.put(k, v)
    def scan(self, k, count):
        with self.env.begin() as t:
            c = t.cursor(); c.set_range(k)
            for _ in zip(range(count), c):
                pass
    def count(self):
        with self.env.begin() as t:
            return t.stat()['entries']
    def close(self):
        self.env.close()
class Leveldb:
    def __init__(self, readonly=False):
        import plyvel
        self.db = plyvel.DB(path, create_if_missing=True)
    def get(self, k):
        return self.db.get(k)
    def put(self, k, v, check=None):
        # A read-modify-write is a read, then a synced write: LevelDB has no transactions.
        if check is not None:
            assert self.db.get(k) == check
        self.db.put(k, v, sync=True)
    def load(self, items):
        with self.db.write_batch(sync=True) as b:
            for k, v in items:
                b.put(k, v)
    def scan(self, k, count):
        with self.db.iterator(start=k) as it:
            for _ in zip(range(count), it):
                pass
    def count(self):
        return sum(1 for _ in self.db.iterator(include_value=False))
    def close(self):
        self.db.close()
Store = Leveldb if store == 'leveldb' else Lmdb
db = Store()
rnd = random.Random(11)
def value(k, version):
    return (b'%d:%d:' % (k, version)).ljust(1000, b'x')
def key(k):
    return b'user%08d' % k
versions = {k: 0 for k in range(records)}
db.load((key(k), value(k, 0)) for k in range(records))
weights, total = [], 0.0
for i in range(1, 4 * records + 1):
    total += 1.0 / i ** 0.99
    weights.append(total)
def zipf(limit):
    while True:
        i = bisect.bisect_left(weights, rnd.random() * total)
        if i < limit:
            return (i * 2654435761) % limit  # scrambled, as YCSB scrambles its zipfian keys
def latest(limit):
    while True:
        i = bisect.bisect_left(weights, rnd.random() * total)
        if i < limit:
            return limit - 1 - i
mixes = [('a', {'read': 50, 'update': 50}), ('b', {'read': 95, 'update': 5}),
         ('c', {'read': 100}), ('d', {'read': 95, 'insert': 5}),
         ('e', {'scan': 95, 'insert': 5}), ('f', {'read': 50, 'rmw': 50})]
phases = []
for name, mix in mixes:
    ops = [op for op, share in mix.items() for _ in range(share)]
    lat = []
    start = time.perf_counter_ns()
    for _ in range(n):
        op = rnd.choice(ops)
        limit = len(versions)
        k = latest(limit) if name == 'd' else zipf(limit)
        t0 = time.perf_counter_ns()
        if op == 'read':
            assert db.get(key(k)) == value(k, versions[k])
        elif op == 'scan':
            db.scan(key(k), 1 + rnd.randrange(100))
        elif op == 'insert':
            k = limit
            db.put(key(k), value(k, 0))
            versions[k] = 0
        else:
            db.put(key(k), value(k, versions[k] + 1), value(k, versions[k]) if op == 'rmw' else None)
            versions[k] += 1
        lat.append(time.perf_counter_ns() - t0)
    phases.append({'op': 'ycsb-' + name, 'elapsed_ns': time.perf_counter_ns() - start, 'lat': lat})
db.close()
db = Store(readonly=True)
bad = sum(1 for k, v in versions.items() if db.get(key(k)) != value(k, v))
count = db.count()
db.close()
print(json.dumps({'phases': phases, 'bad': bad, 'count': count, 'want': len(versions)}))
"#;

/// The stores `kv` runs: the variant's name and the driver's name for it.
const STORES: [(&str, &str); 3] = [
    ("lmdb", "default"),
    ("lmdb-writemap", "writemap"),
    ("leveldb", "leveldb"),
];

/// The `kv` workload: every store, each on a fresh directory.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    let mut all = Vec::new();
    for (variant, mode) in STORES {
        all.extend(run_store(place, ops, variant, mode)?);
    }
    Ok(all)
}

fn run_store(place: &Place, ops: usize, variant: &str, mode: &str) -> io::Result<Vec<Measured>> {
    let dir = place.dir.join("kv");
    place.run("mkdir", &["-p".as_ref(), dir.as_os_str()])?;
    let report = run_driver(place, KV_DRIVER, &[path_arg(&dir)?, &ops.to_string(), mode]);
    place.run("rm", &["-rf".as_ref(), dir.as_os_str()])?;
    let report = report?;
    let (bad, count, want) = (
        report["bad"].as_u64().unwrap_or(u64::MAX),
        report["count"].as_u64().unwrap_or(0),
        report["want"].as_u64().unwrap_or(1),
    );
    if bad != 0 || count != want {
        return Err(io::Error::other(format!(
            "{variant} lost or corrupted data: {bad} records differ, {count} of {want} there"
        )));
    }
    report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|phase| measured(phase, variant, 1000))
        .collect()
}
