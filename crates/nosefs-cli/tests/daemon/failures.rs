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

/// A client is never trusted: one that sends 20,000 requests of every kind (`NOSEFS_REQUEST_FUZZ="SEED
/// COUNT"` for others) with random fields
/// (its own handles, small numbers, extremes, names and random bytes, cut short at random) gets
/// answers or errors, never a daemon that panics or stops: afterwards the same connection and a
/// new process are served, and the image fscks clean.
#[test]
fn random_requests_from_a_client_get_errors_and_break_nothing() {
    use nosefs_daemon::client::Remote;
    use nosefs_daemon::proto::{op, Enc};
    use nosefs_daemon::service::{OpenedPath, Service};
    use std::os::unix::ffi::OsStrExt;

    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    std::fs::create_dir(m.mnt.join("d")).unwrap();
    std::fs::write(m.mnt.join("d/f"), b"kept").unwrap();
    std::fs::write(m.mnt.join("g"), vec![7u8; 100_000]).unwrap();
    let prefix = m.mnt.as_os_str().as_bytes().to_vec();
    let remote = Remote::connect(&prefix).unwrap().expect("a noseFS mount");
    let path = |name: &str| [prefix.as_slice(), b"/", name.as_bytes()].concat();
    // Handles this connection really holds, for the fields that name one.
    let mut handles = Vec::new();
    for (name, flags) in [
        ("d", libc::O_RDONLY),
        ("g", libc::O_RDWR),
        ("d/h", libc::O_RDWR | libc::O_CREAT),
    ] {
        match remote.open_path(path(name), true, flags, 0o644, 0o022) {
            Ok(OpenedPath::Opened(_, opened)) => handles.push(opened.handle),
            other => panic!("open {name}: {other:?}"),
        }
    }
    let names: [&[u8]; 8] = [
        b"",
        b"x",
        b"d",
        b"d/f",
        b"..",
        b"/",
        b"d/../g",
        &[0xff, 0, b'/', 0x80],
    ];
    // The long variant: NOSEFS_REQUEST_FUZZ="SEED COUNT".
    let fuzz = std::env::var("NOSEFS_REQUEST_FUZZ").unwrap_or_default();
    let mut fuzz = fuzz
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    let mut seed = fuzz.next().unwrap_or(0x2545_f491_4f6c_dd1d) | 1;
    let count = fuzz.next().unwrap_or(20_000);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut answered, mut refused) = (0, 0);
    for _ in 0..count {
        let opcode = (next() % 50) as u32;
        let mut e = Enc::new(opcode);
        for _ in 0..next() % 9 {
            match next() % 8 {
                0 => e.u64(handles[(next() % 3) as usize]),
                1 => e.u64(next() % 64),
                2 => e.u64([0, u64::MAX, i64::MAX as u64, 1 << 40][(next() % 4) as usize]),
                3 => e.u32(next() as u32),
                4 => e.u8(next() as u8),
                5 => {
                    let name = names[(next() % 8) as usize];
                    let full = if next() % 2 == 0 {
                        [prefix.as_slice(), b"/", name].concat()
                    } else {
                        name.to_vec()
                    };
                    e.bytes(&full)
                }
                6 => e.bytes(&vec![next() as u8; (next() % 300) as usize]),
                _ => e.u32((next() % 5000) as u32),
            };
        }
        // A request that panics in the daemon is answered EIO (the daemon goes on); so is a
        // lend whose descriptor no longer fits this client's socket, which never takes them.
        match remote.call(&e) {
            Ok(_) => answered += 1,
            Err(nosefs_core::Errno::EIO) if matches!(opcode, op::SHADOW_LEND | op::IMAGE_LEND) => {}
            Err(nosefs_core::Errno::EIO) => panic!("EIO (a panic in the daemon?) for {e:?}"),
            Err(_) => refused += 1,
        }
    }
    eprintln!("{answered} requests answered, {refused} refused");
    assert!(
        answered > 1000 && refused > 1000,
        "{answered} answered, {refused} refused"
    );
    remote.nop().expect("the connection still served");
    // The requests may have renamed or removed names (as a client may): a new process is
    // still served, and writes and reads a file.
    let out = m.run(r#"echo fresh > "$D/after" && cat "$D/after" && ls "$D" > /dev/null"#);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fresh\n");
    remote.leave();
    m.unmount_and_fsck();
}
