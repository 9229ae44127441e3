//! `kv`: YCSB's core workloads A-F on LMDB, in its default mode (reads from a read-only
//! mapping, writes with pwrite and fdatasync: variant `lmdb`) and with `writemap` (stores into
//! a writable mapping of the whole map size, synced with msync: variant `lmdb-writemap`).

use std::io;

use super::{measured, path_arg, run_driver, Measured, Place};

/// The YCSB driver on LMDB: a load of `records` in one transaction, then `n` operations of each
/// core workload, every write its own durable transaction; then every key's value is checked.
/// A third argument `writemap` opens the environment with writemap.
const KV_DRIVER: &str = r#"
import bisect, json, lmdb, random, sys, time
path, n = sys.argv[1], int(sys.argv[2])
writemap = len(sys.argv) > 3 and sys.argv[3] == 'writemap'
records = 10000
env = lmdb.open(path, map_size=1 << 30, writemap=writemap)
rnd = random.Random(11)
def value(k, version):
    return (b'%d:%d:' % (k, version)).ljust(1000, b'x')
versions = {}
with env.begin(write=True) as t:
    for k in range(records):
        t.put(b'user%08d' % k, value(k, 0)); versions[k] = 0
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
            with env.begin() as t:
                assert t.get(b'user%08d' % k) == value(k, versions[k])
        elif op == 'scan':
            with env.begin() as t:
                c = t.cursor(); c.set_range(b'user%08d' % k)
                for _ in zip(range(1 + rnd.randrange(100)), c):
                    pass
        elif op == 'insert':
            k = limit
            with env.begin(write=True) as t:
                t.put(b'user%08d' % k, value(k, 0))
            versions[k] = 0
        else:
            with env.begin(write=True) as t:
                if op == 'rmw':
                    assert t.get(b'user%08d' % k) == value(k, versions[k])
                t.put(b'user%08d' % k, value(k, versions[k] + 1))
            versions[k] += 1
        lat.append(time.perf_counter_ns() - t0)
    phases.append({'op': 'ycsb-' + name, 'elapsed_ns': time.perf_counter_ns() - start, 'lat': lat})
env.close()
env = lmdb.open(path, map_size=1 << 30, readonly=True)
with env.begin() as t:
    bad = sum(1 for k, v in versions.items() if t.get(b'user%08d' % k) != value(k, v))
    count = t.stat()['entries']
print(json.dumps({'phases': phases, 'bad': bad, 'count': count, 'want': len(versions)}))
"#;

/// The `kv` workload: both modes, each on a fresh environment.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    let mut all = run_mode(place, ops, "lmdb")?;
    all.extend(run_mode(place, ops, "lmdb-writemap")?);
    Ok(all)
}

fn run_mode(place: &Place, ops: usize, variant: &str) -> io::Result<Vec<Measured>> {
    let dir = place.dir.join("lmdb");
    place.run("mkdir", &["-p".as_ref(), dir.as_os_str()])?;
    let mode = if variant == "lmdb-writemap" {
        "writemap"
    } else {
        "default"
    };
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
            "LMDB ({variant}) lost or corrupted data: {bad} records differ, {count} of {want} there"
        )));
    }
    report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|phase| measured(phase, variant, 1000))
        .collect()
}
