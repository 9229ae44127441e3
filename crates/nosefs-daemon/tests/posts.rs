//! Posted writes (`server::posts`): a client's write answered before the daemon applies it is
//! still seen by every other client at once, keeps its order, shows in the size others
//! follow, and tells its error at the next fsync.

mod common;

use std::sync::atomic::AtomicU64;

use common::{found, Daemon};
use nosefs_core::Errno;
use nosefs_daemon::service::Service;

const IMAGE_BYTES: u64 = 256 << 20;

/// A daemon whose server threads wait 2 ms before applying their own client's posts, so that
/// whoever looks next meets them unapplied (a slow thread, made the rule): without the
/// daemon's settling, these tests fail.
fn daemon() -> Daemon {
    std::env::set_var("NOSEFS_TEST_POST_DELAY_US", "2000");
    Daemon::start_with(IMAGE_BYTES, true)
}

fn record(i: u64) -> [u8; 8] {
    *format!("{i:08}").as_bytes().first_chunk().unwrap()
}

#[test]
fn a_posted_write_is_seen_by_another_client_as_soon_as_it_returns() {
    let daemon = daemon();
    let (alice, bob) = (daemon.client(), daemon.client());
    let a = alice
        .open(
            &found(&alice, daemon.path("log")),
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            0o022,
        )
        .unwrap();
    let b = bob
        .open(&found(&bob, daemon.path("log")), libc::O_RDONLY, 0, 0)
        .unwrap();
    for i in 0..2000u64 {
        alice.write(a.handle, i * 8, &record(i), false).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(bob.read(b.handle, i * 8, &mut buf), Ok(8), "record {i}");
        assert_eq!(buf, record(i), "record {i}");
        assert_eq!(bob.fstat(b.handle).unwrap().size, (i + 1) * 8);
    }
    // Alice's own requests come after her posts too.
    let mut all = vec![0u8; 2000 * 8];
    assert_eq!(alice.read(a.handle, 0, &mut all), Ok(all.len()));
    assert!(all
        .chunks(8)
        .enumerate()
        .all(|(i, r)| r == record(i as u64)));
    alice.fsync(a.handle).unwrap();
    assert!(
        daemon.served("write_posted") >= 1900,
        "the writes were posted"
    );
    alice.close(a.handle);
    bob.close(b.handle);
    drop((alice, bob));
    daemon.stop_and_fsck();
}

#[test]
fn posts_of_a_client_that_went_away_are_applied() {
    let daemon = daemon();
    let alice = daemon.client();
    let a = alice
        .open(
            &found(&alice, daemon.path("f")),
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            0o022,
        )
        .unwrap();
    for i in 0..500u64 {
        alice.write(a.handle, i * 8, &record(i), false).unwrap();
    }
    drop(alice); // no fsync, no close: its process ended
    let bob = daemon.client();
    let b = bob
        .open(&found(&bob, daemon.path("f")), libc::O_RDONLY, 0, 0)
        .unwrap();
    let mut all = vec![0u8; 500 * 8];
    assert_eq!(bob.read(b.handle, 0, &mut all), Ok(all.len()));
    assert!(all
        .chunks(8)
        .enumerate()
        .all(|(i, r)| r == record(i as u64)));
    assert!(daemon.served("write_posted") > 0);
    bob.close(b.handle);
    drop(bob);
    daemon.stop_and_fsck();
}

#[test]
fn a_size_another_client_follows_takes_the_grant_back() {
    let daemon = daemon();
    let (alice, bob) = (daemon.client(), daemon.client());
    let a = alice
        .open(
            &found(&alice, daemon.path("f")),
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            0o022,
        )
        .unwrap();
    for i in 0..100u64 {
        alice.write(a.handle, i * 8, &record(i), false).unwrap();
    }
    alice.fstat(a.handle).unwrap(); // served after them
    let posted = daemon.served("write_posted");
    assert!(posted > 0);
    let b = bob
        .open(&found(&bob, daemon.path("f")), libc::O_RDONLY, 0, 0)
        .unwrap();
    let watch = AtomicU64::new(0);
    assert_eq!(bob.end_of(b.handle, &watch), Ok(800));
    for i in 100..300u64 {
        alice.write(a.handle, i * 8, &record(i), false).unwrap();
        // Bob's answer comes from his shared memory, without asking the daemon.
        assert_eq!(bob.end_of(b.handle, &watch), Ok((i + 1) * 8));
    }
    assert_eq!(
        daemon.served("write_posted"),
        posted,
        "no post after the watch"
    );
    alice.close(a.handle);
    bob.close(b.handle);
    drop((alice, bob));
    daemon.stop_and_fsck();
}

#[test]
fn a_posted_writes_error_is_told_by_the_next_fsync() {
    let daemon = daemon();
    let (alice, bob) = (daemon.client(), daemon.client());
    let a = alice
        .open(
            &found(&alice, daemon.path("a")),
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            0o022,
        )
        .unwrap();
    alice.write(a.handle, 0, &record(0), false).unwrap(); // granted with this one
    alice.write(a.handle, 8, &record(1), false).unwrap(); // posted
    alice.fstat(a.handle).unwrap(); // served after it
    assert_eq!(daemon.served("write_posted"), 1);
    // Bob fills the image (writes too large to post, then small ones refused a grant: the
    // image is nearly full by then).
    let b = bob
        .open(
            &found(&bob, daemon.path("b")),
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            0o022,
        )
        .unwrap();
    let mut at = 0u64;
    for chunk in [1 << 20, 4096] {
        let data = vec![7u8; chunk];
        while bob.write(b.handle, at, &data, false).is_ok() {
            at += chunk as u64;
        }
    }
    let full = vec![1u8; 64 << 10];
    assert_eq!(
        alice.write(a.handle, 1 << 20, &full, false),
        Ok(1 << 20),
        "posted"
    );
    assert_eq!(alice.fsync(a.handle), Err(Errno::ENOSPC));
    assert_eq!(alice.fsync(a.handle), Ok(()), "told once");
    let mut buf = [0u8; 16];
    assert_eq!(alice.read(a.handle, 0, &mut buf), Ok(16));
    assert_eq!(buf[..8], record(0));
    assert_eq!(buf[8..], record(1));
    alice.close(a.handle);
    bob.close(b.handle);
    drop((alice, bob));
    daemon.stop_and_fsck();
}

#[test]
fn a_client_posts_to_more_files_over_its_life_than_its_board_has_words() {
    let daemon = daemon();
    let alice = daemon.client();
    // A journal per transaction, as SQLite's default mode makes: created, written, closed,
    // removed, a thousand times (the board has 256 words).
    for i in 0..1000u64 {
        let name = format!("journal{i}");
        let j = alice
            .open(
                &found(&alice, daemon.path(&name)),
                libc::O_CREAT | libc::O_RDWR,
                0o600,
                0o022,
            )
            .unwrap();
        alice.write(j.handle, 0, &record(i), false).unwrap(); // granted with this one
        alice.write(j.handle, 8, &record(i), false).unwrap(); // posted
        alice.fsync(j.handle).unwrap();
        alice.close(j.handle);
    }
    assert!(daemon.served("write_posted") >= 990, "posted to every file");
    drop(alice);
    daemon.stop_and_fsck();
}
