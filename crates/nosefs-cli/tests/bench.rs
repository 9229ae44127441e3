//! `nosefs bench` end to end: a small run on the native library, a private tmpfs and an ext4
//! ramdisk writes the table, the JSON records, the report and the plots, and leaves nothing
//! mounted, attached or written behind; neither does a run interrupted by SIGINT. The scratch
//! mounts need root (as CI has); without it each test says why it did not run.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn nosefs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nosefs"))
}

fn is_root() -> bool {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        eprintln!("skipped: scratch mounts need root");
    }
    root
}

/// What a bench process with `pid` may leave behind: mounts, loop devices, files in /dev/shm
/// and mount points in the temporary directory.
fn leftovers(pid: u32) -> Vec<String> {
    let tag = format!("nosefs-bench-{pid}");
    let mut found: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&tag))
        .map(|l| format!("mounted: {l}"))
        .collect();
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    found.extend(
        String::from_utf8_lossy(&loops.stdout)
            .lines()
            .filter(|l| l.contains(&tag))
            .map(|l| format!("loop device: {l}")),
    );
    for dir in ["/dev/shm".into(), std::env::temp_dir()] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with(&tag) {
                found.push(format!("left in {}: {name}", dir.display()));
            }
        }
    }
    found
}

/// Waits for a bench process; returns its pid (to look for leftovers) and its output.
fn finish(child: std::process::Child) -> (u32, std::process::Output) {
    let pid = child.id();
    (pid, child.wait_with_output().unwrap())
}

#[test]
fn a_small_run_writes_table_json_report_and_plots_and_cleans_up() {
    if !is_root() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let child = nosefs()
        .args([
            "bench",
            "--quick",
            "--runs",
            "1",
            "--threads",
            "1",
            "--files",
            "300",
        ])
        .args(["--writes", "64", "--target", "nosefs", "--target", "tmpfs"])
        .args([
            "--target",
            "ramdisk:ext4",
            "--ramdisk-size",
            "256M",
            "--json",
        ])
        .arg(&json)
        .arg("--out")
        .arg(out.path().join("results"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (pid, output) = finish(child);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("| nosefs | create | files=300 | 1 |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("harness cost per timed operation"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| nosefs | write+msync | file=1MiB | 1 |"),
        "the native library maps files: {stdout}"
    );

    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for target in ["nosefs", "tmpfs", "ramdisk:ext4"] {
        for (workload, op) in [("dirops", "create"), ("fileops", "append+fsync")] {
            let found = records
                .iter()
                .find(|r| r["target"] == target && r["workload"] == workload && r["op"] == op);
            let r = found.unwrap_or_else(|| panic!("no {target} {workload} {op} record"));
            for field in ["threads", "io_size", "runs", "p50_ns", "p99_ns", "p999_ns"] {
                assert!(r[field].is_u64(), "{field} in {r}");
            }
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["p50_ns"].as_u64() <= r["p99_ns"].as_u64(), "{r}");
            assert!(r["p99_ns"].as_u64() <= r["p999_ns"].as_u64(), "{r}");
        }
    }
    let native_create = records
        .iter()
        .find(|r| r["target"] == "nosefs" && r["op"] == "create")
        .unwrap();
    assert!(native_create["fences_per_op"].as_f64().unwrap() >= 1.0);

    let results = out.path().join("results");
    let report = std::fs::read_to_string(results.join("report.md")).unwrap();
    assert!(report.contains("![dirops-latency.svg](dirops-latency.svg)"));
    for plot in [
        "dirops-latency.svg",
        "fileops-latency.svg",
        "mmap-latency.svg",
    ] {
        let svg = std::fs::read_to_string(results.join(plot)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("ramdisk:ext4"),
            "{plot}"
        );
    }
    standing_is_written_from_the_run(&results);
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

/// scripts/standing.py turns the run into "Where noseFS stands": a table per workload with
/// every target's rate and noseFS's ratios, spliced between its markers (twice: replaced, not
/// added again).
fn standing_is_written_from_the_run(results: &std::path::Path) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/standing.py");
    let doc = results.join("benchmarks.md");
    std::fs::write(
        &doc,
        "# Benchmarks\n\nIntro.\n\n## History\n\nOld figures.\n",
    )
    .unwrap();
    for _ in 0..2 {
        let out = Command::new("python3")
            .arg(script)
            .arg(results)
            .arg("--doc")
            .arg(&doc)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let text = std::fs::read_to_string(&doc).unwrap();
    assert_eq!(text.matches("## Where noseFS stands").count(), 1, "{text}");
    assert!(
        text.find("## Where noseFS stands") < text.find("## History"),
        "{text}"
    );
    for wanted in [
        "### dirops",
        "### fileops",
        "| nosefs | tmpfs | ramdisk:ext4 | nosefs / tmpfs | nosefs / ramdisk:ext4 |",
        "| create (files=300) | 1 |",
        "| aligned-overwrite+fsync 4K | 1 |",
    ] {
        assert!(text.contains(wanted), "no {wanted:?} in:\n{text}");
    }
}

#[test]
fn macro_workloads_report_every_flowop() {
    if !is_root() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let output = nosefs()
        .args(["bench", "--runs", "1", "--threads", "1", "--scale", "0.004"])
        .args([
            "--duration",
            "0.3",
            "--target",
            "nosefs",
            "--target",
            "tmpfs",
        ])
        .args(["--workload", "varmail", "--workload", "webserver", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let varmail = [
        "delete", "create", "append", "fsync", "close", "open", "read", "all",
    ];
    let webserver = ["open", "read", "close", "append-log", "all"];
    for target in ["nosefs", "tmpfs"] {
        for (workload, flowops) in [("varmail", &varmail[..]), ("webserver", &webserver[..])] {
            for op in flowops {
                let found = records
                    .iter()
                    .find(|r| r["target"] == target && r["workload"] == workload && r["op"] == *op);
                let r = found.unwrap_or_else(|| panic!("no {target} {workload} {op}"));
                assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            }
        }
    }
}

#[test]
fn an_interrupted_run_leaves_nothing_mounted_or_attached() {
    if !is_root() {
        return;
    }
    let mut child = nosefs()
        .args(["bench", "--target", "tmpfs", "--target", "ramdisk:ext4"])
        .args([
            "--workload",
            "dirops",
            "--files",
            "1000000",
            "--threads",
            "1",
        ])
        .args(["--ramdisk-size", "1G"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let ramdisk = format!("nosefs-bench-{pid}-ramdisk-ext4");
    let deadline = Instant::now() + Duration::from_secs(60);
    // Wait until the ramdisk is mounted and the benchmark is writing into it.
    while !std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(&ramdisk)
    {
        assert!(Instant::now() < deadline, "the ramdisk never appeared");
        assert!(child.try_wait().unwrap().is_none(), "bench exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "bench finished too soon to interrupt"
    );
    let killed = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    assert!(killed.unwrap().success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{output:?}");
    // The loop device of a lazily unmounted file system detaches once its last user is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leftovers(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

#[test]
fn the_matrix_compares_every_target_normalized_to_the_best_and_cleans_up() {
    if !is_root() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let results = out.path().join("matrix");
    let child = nosefs()
        .args(["bench", "--matrix", "--quick", "--threads", "1"])
        .args(["--scale", "0.002", "--duration", "0.3"])
        .args([
            "--target",
            "nosefs",
            "--target",
            "nosefs-fuse",
            "--target",
            "tmpfs",
        ])
        .args(["--target", "ramdisk:f2fs", "--ramdisk-size", "512M"])
        .args([
            "--workload",
            "varmail",
            "--workload",
            "webproxy-depths",
            "--out",
        ])
        .arg(&results)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (pid, output) = finish(child);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{output:?}");
    let report = std::fs::read_to_string(results.join("report.md")).unwrap();
    let matrix = report
        .split("## File-system matrix")
        .nth(1)
        .unwrap_or_else(|| panic!("no matrix in {report}"));
    assert!(
        matrix.contains("| target | varmail | webproxy d=0.7 | webproxy d=2.1 | webproxy d=3.4 |"),
        "{matrix}"
    );
    for target in ["nosefs", "nosefs-fuse", "tmpfs"] {
        let row = matrix
            .lines()
            .find(|l| l.starts_with(&format!("| {target} | ")))
            .unwrap_or_else(|| panic!("no {target} row in {matrix}"));
        // Four cells, each a rate and its fraction of the column's best (at most 1).
        let fractions: Vec<f64> = row
            .split('(')
            .skip(1)
            .map(|c| c.split(')').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(fractions.len(), 4, "{row}");
        assert!(fractions.iter().all(|&f| f > 0.0 && f <= 1.0), "{row}");
        assert!(
            matrix.contains(&format!("- {target}: ")),
            "no webproxy depth ratio for {target}"
        );
    }
    // Every column has one best target.
    let header = matrix
        .lines()
        .position(|l| l.starts_with("| target"))
        .unwrap();
    let best_marks = matrix
        .lines()
        .skip(header)
        .take(5)
        .map(|l| l.matches("(1.00)").count());
    assert_eq!(best_marks.sum::<usize>(), 4, "{matrix}");
    // A file system this machine cannot run is listed with the reason, not silently dropped.
    assert!(matrix.contains("ramdisk:f2fs"), "{matrix}");
    assert!(matrix.contains("ext4-dax"), "{matrix}");
    let svg = std::fs::read_to_string(results.join("matrix-1t.svg")).unwrap();
    assert!(svg.contains("nosefs-fuse") && svg.contains("webproxy d=3.4"));
    assert!(report.contains("![matrix-1t.svg](matrix-1t.svg)"));
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

/// The application workloads run the real programs on a kernel directory and under the shim
/// (issue 38), check their data afterwards, and report every operation; the native library,
/// which runs no programs, says why it did not.
#[test]
fn application_workloads_run_the_programs_and_check_their_data() {
    let redis = std::path::Path::new("/usr/bin/redis-server").exists();
    let lmdb = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import lmdb"])
        .status()
        .is_ok_and(|s| s.success());
    if !is_root() || !redis || !lmdb {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let output = nosefs()
        .args(["bench", "--runs", "1", "--threads", "1", "--quick"])
        .args([
            "--target",
            "tmpfs",
            "--target",
            "nosefs-preload",
            "--target",
            "nosefs",
        ])
        .args([
            "--workload",
            "sqlite",
            "--workload",
            "redis",
            "--workload",
            "kv",
            "--workload",
            "rocksdb",
            "--workload",
            "oltp",
            "--workload",
            "tools",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for target in ["tmpfs", "nosefs-preload"] {
        for (workload, op) in [
            ("sqlite", "insert"),
            ("sqlite", "update"),
            ("redis", "set"),
            ("redis", "incr"),
            ("redis", "lpush"),
            ("kv", "ycsb-a"),
            ("kv", "ycsb-e"),
            ("kv", "ycsb-f"),
        ] {
            let found = records
                .iter()
                .find(|r| r["target"] == target && r["workload"] == workload && r["op"] == op);
            let r = found.unwrap_or_else(|| panic!("no {target} {workload} {op}: {output:?}"));
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let has = |target: &str, workload: &str, op: &str, variant: &str| {
        records.iter().any(|r| {
            r["target"] == target
                && r["workload"] == workload
                && r["op"] == op
                && r["variant"].as_str().unwrap().starts_with(variant)
        })
    };
    let installed = |path: &str| std::path::Path::new(path).exists();
    if installed("/usr/lib/postgresql/15/bin/initdb") {
        for op in ["tpcb", "tpcc", "tpcc-new-order"] {
            assert!(
                has("tmpfs", "oltp", op, "pgbench"),
                "{op} on tmpfs: {output:?}"
            );
        }
    }
    if installed("/usr/sbin/mariadbd") && installed("/usr/bin/sysbench") {
        assert!(
            has("tmpfs", "oltp", "oltp-read-write", "sysbench"),
            "sysbench on MariaDB on tmpfs: {output:?}"
        );
    }
    for target in ["tmpfs", "nosefs-preload"] {
        // SQLite's TPC-C-like mix runs in every mode; in embedded mode it is all of `oltp`.
        assert!(
            has(target, "oltp", "tpcc", "sqlite3"),
            "{target}: {output:?}"
        );
        assert!(has(target, "kv", "ycsb-a", "lmdb-writemap"), "{output:?}");
        if std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import plyvel"])
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(has(target, "kv", "ycsb-f", "leveldb"), "{output:?}");
        }
    }
    if installed("/usr/bin/db_bench") {
        // Its own second process checks that every key is there; a run that lost one fails.
        for target in ["tmpfs", "nosefs-preload"] {
            for op in ["fillseq-sync", "overwrite-sync", "readrandom"] {
                assert!(
                    has(target, "rocksdb", op, "db_bench"),
                    "rocksdb {op} on {target}: {output:?}"
                );
            }
        }
    }
    for op in ["untar", "git-commit", "git-clone", "make", "rsync"] {
        let found = records
            .iter()
            .any(|r| r["target"] == "tmpfs" && r["workload"] == "tools" && r["op"] == op);
        assert!(found, "tools {op} on tmpfs: {output:?}");
    }
    assert!(
        !records.iter().any(|r| r["target"] == "nosefs"),
        "the native library runs no programs"
    );
    assert!(
        !records.iter().any(|r| r["target"] == "nosefs-preload"
            && r["workload"] == "oltp"
            && !r["variant"].as_str().unwrap().starts_with("sqlite3")),
        "a server of many processes is not run in embedded mode"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("not run: nosefs sqlite"),
        "the reason is printed: {stdout}"
    );
}
