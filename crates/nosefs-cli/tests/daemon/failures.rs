//! Failures and concurrency: appenders racing on one log, a killed client, a killed daemon
//! and the next mount's recovery.

use super::*;

#[test]
fn four_processes_append_to_one_log_with_no_lost_or_torn_record() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"set -e
for p in 1 2 3 4; do
  ( for i in $(seq 1 400); do printf 'process %s record %04d ..............................\n' $p $i; done >> "$D/log" ) &
done
wait
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let log = std::fs::read_to_string(m.mnt.join("log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1600, "{}", &log[..log.len().min(2000)]);
    for p in 1..=4 {
        let mine: Vec<u32> = lines
            .iter()
            .filter(|l| l.starts_with(&format!("process {p} ")))
            .map(|l| {
                assert!(l.ends_with("..."), "torn: {l:?}");
                l[17..21].parse().unwrap()
            })
            .collect();
        assert_eq!(mine, (1..=400).collect::<Vec<_>>(), "process {p}");
    }
    m.unmount_and_fsck();
}

/// A child process killed if the test fails before it ends (no stray writers left behind).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_line(child: &mut Child, what: &str) {
    use std::io::BufRead;
    let stdout = child.stdout.as_mut().unwrap();
    let mut reader = std::io::BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains(what), "got {line:?}");
}

#[test]
fn a_killed_client_loses_nothing_fsynced_and_the_daemon_serves_on() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // Each round writes f<i % 50> whole and fsyncs it, then records i in `done` (fsynced).
    let writer = r#"cd "$D" || exit 9; exec python3 -c '
import os
print("started", flush=True)
i = 0
while True:
    fd = os.open(f"f{i % 50}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, (f"{i} " * 1000).encode())
    os.fsync(fd)
    os.close(fd)
    fd = os.open("done.tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, str(i).encode())
    os.fsync(fd)
    os.close(fd)
    os.rename("done.tmp", "done")
    i += 1
'"#;
    let mut child = Reaped(
        m.shim_command(writer)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_line(&mut child.0, "started");
    std::thread::sleep(Duration::from_millis(500));
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let done: usize = std::fs::read_to_string(m.mnt.join("done"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(done > 0);
    // Rounds up to `done` completed; round done+1 may have been cut anywhere in its write.
    for i in done.saturating_sub(48)..=done {
        let data = std::fs::read_to_string(m.mnt.join(format!("f{}", i % 50))).unwrap();
        let next = i + 50;
        let expected = format!("{i} ").repeat(1000);
        let newer = next == done + 1;
        assert!(
            data == expected || newer,
            "f{}: {}",
            i % 50,
            &data[..data.len().min(40)]
        );
    }
    let out = m.run(r#"cd "$D" || exit 9; echo after > after; cat after"#);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "after\n");
    m.unmount_and_fsck();
}

#[test]
fn a_killed_daemon_gives_its_clients_eio_and_the_next_mount_recovers() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = m.run(r#"cd "$D" || exit 9; echo kept > kept; sync"#);
    assert!(out.status.success(), "{}", text(&out));
    let client = r#"cd "$D" || exit 9; echo started; while echo x >> grow; do sleep 0.01; done; echo failed >&2; exit 3"#;
    let mut child = Reaped(
        m.shim_command(client)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_line(&mut child.0, "started");
    std::thread::sleep(Duration::from_millis(200));
    let pid = m.server_pid();
    let killed = Instant::now();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the client hangs after the daemon died"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let waited = killed.elapsed();
    assert_eq!(status.code(), Some(3), "the client's write failed");
    assert!(waited < Duration::from_secs(2), "it took {waited:?}");
    let _ = Command::new("umount").arg("-l").arg(&m.mnt).output();
    let out = Command::new(nosefs())
        .arg("mount")
        .arg(&m.image)
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "remount: {}", text(&out));
    assert_eq!(std::fs::read(m.mnt.join("kept")).unwrap(), b"kept\n");
    m.unmount_and_fsck();
}
