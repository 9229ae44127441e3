//! A daemon serving an image in /dev/shm to clients of this test process, without FUSE (any
//! directory names the socket), checked with fsck when it stops.

#![allow(dead_code)] // each test file uses its part

use std::sync::Arc;

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::vfs::Walked;
use nosefs_daemon::client::Remote;
use nosefs_daemon::server::{Options, Server};
use nosefs_daemon::service::Service;

/// The socket is named from the view's device, which every directory in /dev/shm shares: one
/// daemon at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct Daemon {
    _serial: std::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    image: std::path::PathBuf,
    view: std::path::PathBuf,
    server: Option<Server>,
    fs: Option<Arc<Fs>>,
}

impl Daemon {
    /// A daemon of a 64 MiB image.
    pub fn start() -> Daemon {
        Daemon::start_with(64 << 20, false)
    }

    /// A daemon of an image of `image_bytes`, counting what it serves with `stats`.
    pub fn start_with(image_bytes: u64, stats: bool) -> Daemon {
        let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let image = dir.path().join("img");
        let params = MkfsParams {
            image_bytes,
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
            stats,
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

    pub fn client(&self) -> Remote {
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

    pub fn path(&self, name: &str) -> Vec<u8> {
        self.view.join(name).into_os_string().into_encoded_bytes()
    }

    /// Slot pairs given a server thread of their own so far.
    pub fn pair_threads(&self) -> usize {
        self.server.as_ref().unwrap().pair_threads()
    }

    /// How many requests of `kind` the daemon served (it must count: `start_with`).
    pub fn served(&self, kind: &str) -> u64 {
        let report = self.server.as_ref().unwrap().stats_report().unwrap();
        report
            .lines()
            .find_map(|l| {
                let mut fields = l.split('\t');
                (fields.next() == Some(kind)).then(|| fields.next().unwrap().parse().unwrap())
            })
            .unwrap_or(0)
    }

    pub fn stop_and_fsck(mut self) {
        drop(self.server.take());
        let fs = Arc::try_unwrap(self.fs.take().unwrap()).unwrap();
        drop(fs.unmount());
        let options = nosefs_core::fsck::FsckOptions::default();
        let report = nosefs_core::fsck::fsck(&self.image, options).unwrap();
        assert!(report.problems.is_empty(), "{report:?}");
    }
}

pub fn found(client: &Remote, path: Vec<u8>) -> nosefs_core::vfs::Found {
    match client.walk(path, false).unwrap() {
        Walked::Found(f) => f,
        Walked::Outside(p) => panic!("outside: {p:?}"),
    }
}
