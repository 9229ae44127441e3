//! The daemon against clients that do not play by the rules: garbage requests, truncated and
//! lying messages, handles of other clients, paths outside the client's view. Each gets an
//! error; the daemon goes on serving everyone, and the image stays clean. And one client's
//! threads calling at once, each served right.

use std::sync::Arc;

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::vfs::Walked;
use nosefs_core::Errno;
use nosefs_daemon::client::Remote;
use nosefs_daemon::proto::{op, Enc};
use nosefs_daemon::server::{Options, Server, MAX_LOANS_PER_CONNECTION};
use nosefs_daemon::service::Service;

/// The socket is named from the view's device, which every directory in /dev/shm shares: one
/// daemon at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Daemon {
    _serial: std::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    image: std::path::PathBuf,
    view: std::path::PathBuf,
    server: Option<Server>,
    fs: Option<Arc<Fs>>,
}

impl Daemon {
    fn start() -> Daemon {
        let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let image = dir.path().join("img");
        let params = MkfsParams {
            image_bytes: 64 << 20,
            ..MkfsParams::default()
        };
        nosefs_core::mkfs::mkfs(&image, &params).unwrap();
        let fs = Arc::new(Fs::mount(&image, &MountOptions::default()).unwrap());
        // Any directory names the socket (its device); no FUSE mount is needed here.
        let view = dir.path().join("view");
        std::fs::create_dir(&view).unwrap();
        let options = Options {
            allow_other: false,
            invalidate: None,
            stats: false,
            direct_reads: true,
        };
        let server = Server::start(Arc::clone(&fs), &view, options).unwrap();
        Daemon {
            _serial: serial,
            _dir: dir,
            image,
            view,
            server: Some(server),
            fs: Some(fs),
        }
    }

    fn client(&self) -> Remote {
        let st = rustix::fs::stat(&self.view).unwrap();
        let me = rustix::process::geteuid().as_raw();
        let prefix = self.view.as_os_str().as_encoded_bytes();
        Remote::connect_device(
            rustix::fs::major(st.st_dev),
            rustix::fs::minor(st.st_dev),
            me,
            prefix,
        )
        .unwrap()
    }

    fn path(&self, name: &str) -> Vec<u8> {
        self.view.join(name).into_os_string().into_encoded_bytes()
    }

    fn stop_and_fsck(mut self) {
        drop(self.server.take());
        let fs = Arc::try_unwrap(self.fs.take().unwrap()).unwrap();
        drop(fs.unmount());
        let options = nosefs_core::fsck::FsckOptions::default();
        let report = nosefs_core::fsck::fsck(&self.image, options).unwrap();
        assert!(report.problems.is_empty(), "{report:?}");
    }
}

fn found(client: &Remote, path: Vec<u8>) -> nosefs_core::vfs::Found {
    match client.walk(path, false).unwrap() {
        Walked::Found(f) => f,
        Walked::Outside(p) => panic!("outside: {p:?}"),
    }
}

#[test]
fn garbage_gets_errors_and_the_daemon_serves_on() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let bad: Vec<Vec<u8>> = vec![
        vec![],
        vec![1],
        999u32.to_le_bytes().to_vec(),
        [op::WALK.to_le_bytes(), u32::MAX.to_le_bytes()].concat(),
        [op::READ.to_le_bytes().as_slice(), &[0xff; 20]].concat(),
        [op::HOLD.to_le_bytes(), u32::MAX.to_le_bytes()].concat(),
        [op::CLAIM.to_le_bytes().as_slice(), &[7; 12]].concat(),
        [
            op::BIND.to_le_bytes().as_slice(),
            &1u64.to_le_bytes(),
            &(-1i32).to_le_bytes(),
        ]
        .concat(),
    ];
    for request in bad {
        let r = client.call(&Enc {
            buf: request.clone(),
        });
        assert!(r.is_err(), "{request:?} -> {r:?}");
    }
    // Seeded random requests: any answer but a crash.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 200) as usize;
        let mut buf = ((x >> 8) % 40).to_le_bytes()[..4].to_vec();
        for i in 0..len {
            buf.push((x.rotate_left(i as u32) >> 3) as u8);
        }
        let _ = client.call(&Enc { buf });
    }
    client.nop().unwrap();
    let f = found(&client, daemon.path("ok"));
    let opened = client
        .open(&f, libc::O_CREAT | libc::O_RDWR, 0o644, 0o022)
        .unwrap();
    client
        .write(opened.handle, 0, b"still here", false)
        .unwrap();
    client.fsync(opened.handle).unwrap();
    // A read asking more than a slot holds gets what the file has (the daemon bounds it by the
    // slot), at any offset; a write whose length runs past its request is refused.
    let mut read = Enc::new(op::READ);
    read.u64(opened.handle).u64(0).u32(u32::MAX);
    let reply = client.call(&read).unwrap();
    assert_eq!(&reply[..4], &10u32.to_le_bytes());
    assert_eq!(&reply[4..], b"still here");
    let mut far = Enc::new(op::READ);
    far.u64(opened.handle).u64(u64::MAX - 1).u32(u32::MAX);
    assert_eq!(client.call(&far), Err(Errno::EINVAL));
    let mut write = Enc::new(op::WRITE);
    write.u64(opened.handle).u64(0).bool(false).u32(u32::MAX);
    assert!(client.call(&write).is_err());
    client.close(opened.handle);
    drop(client);
    daemon.stop_and_fsck();
}

#[test]
fn a_client_cannot_use_another_clients_handles_or_leave_its_view() {
    let daemon = Daemon::start();
    let alice = daemon.client();
    let mallory = daemon.client();
    let f = found(&alice, daemon.path("secret"));
    let opened = alice
        .open(&f, libc::O_CREAT | libc::O_RDWR, 0o600, 0o022)
        .unwrap();
    alice.write(opened.handle, 0, b"alice's", false).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        mallory.read(opened.handle, 0, &mut buf),
        Err(Errno(libc::EBADF))
    );
    assert_eq!(
        mallory.write(opened.handle, 0, b"x", false),
        Err(Errno(libc::EBADF))
    );
    assert_eq!(mallory.hold(&[opened.handle]), Err(Errno(libc::EBADF)));
    // A ticket is a capability: only its number grants the references.
    assert_eq!(mallory.claim(12345, &[opened.handle]), Err(Errno::ENOENT));
    assert_eq!(mallory.fstat(opened.handle), Err(Errno(libc::EBADF)));
    // Nor through the calls that name a description and act in one request.
    let get = nosefs_core::vfs::XattrCall::Get(b"user.a");
    let by_handle = nosefs_daemon::service::XattrTarget::Handle(opened.handle);
    assert_eq!(mallory.xattr(by_handle, get), Err(Errno(libc::EBADF)));
    assert_eq!(
        mallory.data_map(opened.handle, 0, u64::MAX, 16),
        Err(Errno(libc::EBADF))
    );
    assert_eq!(mallory.path_of(opened.handle), Err(Errno(libc::EBADF)));
    assert_eq!(alice.path_of(opened.handle), Ok(b"/secret".to_vec()));
    assert_eq!(
        mallory.flink(opened.handle, &found(&mallory, daemon.path("stolen"))),
        Err(Errno(libc::EBADF))
    );
    assert_eq!(
        mallory.unlink_in(opened.handle, b"/", b"secret"),
        Err(Errno(libc::EBADF))
    );
    let dir = daemon.path("");
    assert_eq!(
        mallory
            .open_in(opened.handle, &dir, b"secret", false, libc::O_RDONLY, 0, 0)
            .map(|_| ()),
        Err(Errno(libc::EBADF))
    );
    // A path operation names what the daemon's own walk finds, not what the client says.
    let mut forged = found(&mallory, daemon.path("secret"));
    forged.path = b"/etc/passwd".to_vec();
    assert_eq!(mallory.unlink(&forged), Err(Errno::EINVAL));
    // A read-only description does not write.
    let ro = alice.open(&f, libc::O_RDONLY, 0, 0).unwrap();
    assert_eq!(
        alice.write(ro.handle, 0, b"x", false),
        Err(Errno(libc::EBADF))
    );
    assert_eq!(alice.read(opened.handle, 0, &mut buf), Ok(7));
    drop(mallory);
    alice.close(ro.handle);
    alice.close(opened.handle);
    drop(alice);
    daemon.stop_and_fsck();
}

#[test]
fn a_description_handed_over_outlives_its_first_holder() {
    let daemon = Daemon::start();
    let parent = daemon.client();
    let f = found(&parent, daemon.path("shared"));
    let opened = parent
        .open(&f, libc::O_CREAT | libc::O_RDWR, 0o644, 0o022)
        .unwrap();
    let ticket = parent.hold(&[opened.handle]).unwrap();
    // The parent closes and goes away before the child claims: the ticket keeps it open,
    // even after its only name is gone.
    parent
        .unlink(&found(&parent, daemon.path("shared")))
        .unwrap();
    parent.close(opened.handle);
    drop(parent);
    let child = daemon.client();
    child.claim(ticket, &[opened.handle]).unwrap();
    child
        .write(opened.handle, 0, b"orphan data", false)
        .unwrap();
    let mut buf = [0u8; 32];
    assert_eq!(child.read(opened.handle, 0, &mut buf), Ok(11));
    assert_eq!(child.claim(ticket, &[]), Err(Errno::ENOENT), "claimed once");
    child.close(opened.handle);
    assert_eq!(child.fstat(opened.handle), Err(Errno(libc::EBADF)));
    drop(child);
    daemon.stop_and_fsck();
}

#[test]
fn the_threads_of_one_client_are_served_at_once_and_right() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let threads = 8u8;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (client, daemon) = (&client, &daemon);
            s.spawn(move || {
                let path = daemon.path(&format!("thread-{t}"));
                let f = found(client, path.clone());
                let opened = client
                    .open(&f, libc::O_CREAT | libc::O_RDWR, 0o644, 0o022)
                    .unwrap();
                for round in 0..300u32 {
                    let record = [t; 16];
                    let offset = u64::from(round) * 16;
                    client.write(opened.handle, offset, &record, false).unwrap();
                    if round % 10 == 0 {
                        client.fsync(opened.handle).unwrap();
                    }
                    let mut back = [0u8; 16];
                    assert_eq!(client.read(opened.handle, offset, &mut back), Ok(16));
                    assert_eq!(back, record, "thread {t} reads what it wrote");
                    assert!(matches!(
                        client.walk(path.clone(), true),
                        Ok(Walked::Found(_))
                    ));
                }
                assert_eq!(client.fstat(opened.handle).unwrap().size, 300 * 16);
                client.close(opened.handle);
            });
        }
    });
    assert!(
        daemon.server.as_ref().unwrap().pair_threads() >= 1,
        "calls in flight from several threads at once got a second server thread"
    );
    for t in 0..threads {
        let f = found(&client, daemon.path(&format!("thread-{t}")));
        let opened = client.open(&f, libc::O_RDONLY, 0, 0).unwrap();
        let mut all = vec![0u8; 300 * 16];
        assert_eq!(client.read(opened.handle, 0, &mut all), Ok(all.len()));
        assert!(all.iter().all(|&b| b == t));
        client.close(opened.handle);
    }
    drop(client);
    daemon.stop_and_fsck();
}

#[test]
fn a_client_asking_loan_after_loan_is_refused_past_the_limit_and_served_on() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let f = found(&client, daemon.path("mapped"));
    let opened = client
        .open(&f, libc::O_CREAT | libc::O_RDWR, 0o644, 0o022)
        .unwrap();
    client.write(opened.handle, 0, &[7; 4096], false).unwrap();
    // The shim asks one loan per file and access; this client asks for the same one again and
    // again and closes each shadow's descriptor at once.
    let mut loans = Vec::new();
    for _ in 0..MAX_LOANS_PER_CONNECTION {
        let (loan, memfd) = client.lend_shadow(opened.handle, true).unwrap();
        drop(memfd);
        loans.push(loan);
    }
    assert_eq!(
        client.lend_shadow(opened.handle, false).map(|_| ()),
        Err(Errno::EOPNOTSUPP),
        "past the limit"
    );
    // Served on: a loan given back makes room for one more, and the file is as written.
    client
        .take_lent(loans.pop().unwrap(), &[], false, true)
        .unwrap();
    let (loan, _memfd) = client.lend_shadow(opened.handle, false).unwrap();
    client.take_lent(loan, &[], false, true).unwrap();
    let mut read = Enc::new(op::READ);
    read.u64(opened.handle).u64(0).u32(4096);
    let reply = client.call(&read).unwrap();
    assert_eq!(&reply[4..], &[7; 4096][..]);
    client.close(opened.handle);
    // The connection's end gives back the loans it never returned.
    drop(client);
    daemon.stop_and_fsck();
}
