//! [`Remote`] as a [`Service`]: each call encoded as a request, its reply decoded.

use std::sync::atomic::{AtomicU64, Ordering};

use nosefs_core::file::holes::DataExtent;
use nosefs_core::namespace::{Attr, DirEntry, SetAttr};
use nosefs_core::vfs::{Found, Walked, XattrCall};
use nosefs_core::Errno;

use super::{decode, Remote};
use crate::proto::{op, Dec, Enc, DIRECT_MAP_BYTES};
use crate::read_cache::coarse_now_ns;
use crate::service::{
    CachedPieces, Handle, NameIn, Opened, OpenedPath, ReadCache, Service, Statfs, XattrTarget,
};
use nosefs_core::file::direct::ImageView;

fn path_request(opcode: u32, found: &Found) -> Enc {
    let mut e = Enc::new(opcode);
    e.path_of(found);
    e
}

/// The data of a READ or READ_MAPPED reply of `len` bytes in `slot` (its length, then the
/// bytes), copied from the area straight into `out`, of which at most all is taken; how many.
fn data_reply(
    area: &crate::shm::Area,
    slot: usize,
    len: usize,
    out: &mut [u8],
) -> Result<usize, Errno> {
    let mut head = [0u8; 4];
    if len < 4 {
        return Err(Errno::EIO);
    }
    area.get(slot, 4, &mut head);
    let n = (u32::from_le_bytes(head) as usize)
        .min(len - 4)
        .min(out.len());
    area.get(slot, 8, &mut out[..n]);
    Ok(n)
}

/// The largest read made from the client's view of the image; larger ones ask the daemon.
pub const DIRECT_READ_MAX_BYTES: usize = 32 << 10;

impl Remote {
    /// Reads from this client's view of the image with copy `cached` of the file's pieces;
    /// `None` when the copy cannot answer.
    fn read_directly(
        &self,
        view: &ImageView,
        offset: u64,
        buf: &mut [u8],
        cached: &CachedPieces,
    ) -> Option<usize> {
        if cached.access_due_ns != u64::MAX && !cached.access_holds(coarse_now_ns()) {
            return None; // relatime's day is over: the daemon's read notes the access
        }
        let size = self.area.size_word(cached.index)?;
        let generation = self.area.generation_word(cached.index)?;
        let n = cached.map.read(view, (size, generation), offset, buf)?;
        cached.used.store(true, Ordering::Relaxed);
        Some(n)
    }

    /// One READ_MAPPED: `out`'s bytes (the caller made sure they fit one request beside the
    /// copy), and a new copy of the pieces into `cache`.
    fn read_mapped(
        &self,
        handle: Handle,
        offset: u64,
        out: &mut [u8],
        cache: &ReadCache,
    ) -> Result<usize, Errno> {
        let want = out.len();
        let mut e = Enc::new(op::READ_MAPPED);
        e.u64(handle).u64(offset).u32(want as u32);
        // On the heap: the shim runs on the program's threads, whose stacks may be small.
        let mut tail = vec![0u8; DIRECT_MAP_BYTES];
        let (n, tail_len) = self.call_with(&e, &[], |area, slot, len| {
            let n = data_reply(area, slot, len, &mut out[..want])?;
            let tail_len = (len - 4 - n).min(DIRECT_MAP_BYTES);
            area.get(slot, 8 + n, &mut tail[..tail_len]);
            Ok((n, tail_len))
        })?;
        let kept = match Dec::new(&tail[..tail_len]).direct_map() {
            Ok((index, Some(map))) if index != u32::MAX => Some(CachedPieces {
                conn: self.id,
                index,
                access_due_ns: match map.access_holds_ns {
                    u64::MAX => u64::MAX,
                    holds => coarse_now_ns().saturating_add(holds),
                },
                map: std::sync::Arc::new(map),
                used: Default::default(),
            }),
            _ => None,
        };
        cache.keep(kept);
        Ok(n)
    }
}

impl Service for Remote {
    fn walk(&self, path: Vec<u8>, follow_last: bool) -> Result<Walked, Errno> {
        let mut e = Enc::new(op::WALK);
        e.bytes(&path).bool(follow_last);
        decode(&self.call(&e)?, |d| d.walked())
    }

    fn walk_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
    ) -> Result<Option<Found>, Errno> {
        let mut e = Enc::new(op::WALK_IN);
        e.u64(dir).bytes(dir_path).bytes(name).bool(follow_last);
        decode(&self.call(&e)?, |d| match d.u8()? {
            0 => Ok(None),
            _ => d.found().map(Some),
        })
    }

    fn open_path(
        &self,
        path: Vec<u8>,
        follow_last: bool,
        flags: i32,
        mode: u32,
        umask: u32,
    ) -> Result<OpenedPath, Errno> {
        let mut e = Enc::new(op::OPEN_PATH);
        e.bytes(&path)
            .bool(follow_last)
            .u32(flags as u32)
            .u32(mode)
            .u32(umask);
        decode(&self.call(&e)?, |d| match d.walked()? {
            Walked::Outside(p) => Ok(OpenedPath::Outside(p)),
            Walked::Found(found) => {
                let opened = Opened {
                    attr: d.attr()?,
                    kind: d.kind()?,
                    handle: d.u64()?,
                };
                Ok(OpenedPath::Opened(Box::new(found), opened))
            }
        })
    }

    fn open_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
        flags: i32,
        mode: u32,
        umask: u32,
    ) -> Result<Option<(Box<Found>, Opened)>, Errno> {
        let mut e = Enc::new(op::OPEN_IN);
        e.u64(dir)
            .bytes(dir_path)
            .bytes(name)
            .bool(follow_last)
            .u32(flags as u32)
            .u32(mode)
            .u32(umask);
        decode(&self.call(&e)?, |d| match d.u8()? {
            0 => Ok(None),
            _ => {
                let found = d.found()?;
                let opened = Opened {
                    attr: d.attr()?,
                    kind: d.kind()?,
                    handle: d.u64()?,
                };
                Ok(Some((Box::new(found), opened)))
            }
        })
    }

    fn unlink_in(&self, dir: Handle, dir_path: &[u8], name: &[u8]) -> Result<bool, Errno> {
        let mut e = Enc::new(op::UNLINK_IN);
        e.u64(dir).bytes(dir_path).bytes(name);
        decode(&self.call(&e)?, |d| d.bool())
    }

    fn rename_in(&self, from: NameIn<'_>, to: NameIn<'_>, flags: u32) -> Result<bool, Errno> {
        let mut e = Enc::new(op::RENAME_IN);
        e.u64(from.0).bytes(from.1).bytes(from.2);
        e.u64(to.0).bytes(to.1).bytes(to.2).u32(flags);
        decode(&self.call(&e)?, |d| d.bool())
    }

    fn open(&self, found: &Found, flags: i32, mode: u32, umask: u32) -> Result<Opened, Errno> {
        let mut e = path_request(op::OPEN, found);
        e.u32(flags as u32).u32(mode).u32(umask);
        decode(&self.call(&e)?, |d| {
            Ok(Opened {
                attr: d.attr()?,
                kind: d.kind()?,
                handle: d.u64()?,
            })
        })
    }

    fn close(&self, handle: Handle) {
        let mut e = Enc::new(op::CLOSE);
        e.u64(handle);
        self.post(&e);
    }

    fn read(&self, handle: Handle, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(self.chunk_bytes());
            let mut e = Enc::new(op::READ);
            e.u64(handle).u64(offset + done as u64).u32(want as u32);
            let out = &mut buf[done..done + want];
            // The reply is the data's length, then the data: copied from the area straight
            // into the caller's buffer.
            let n = self.call_with(&e, &[], |area, slot, len| data_reply(area, slot, len, out))?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    fn read_cached(
        &self,
        handle: Handle,
        offset: u64,
        buf: &mut [u8],
        cache: &ReadCache,
    ) -> Result<usize, Errno> {
        // A large read would map most of its pages into the view for the first time, which
        // costs ~0.3 us a page here (a fault, or MADV_POPULATE_READ alike), more than the
        // daemon's copy into the area and the client's copy out of it (docs/benchmarks.md).
        if buf.len() > DIRECT_READ_MAX_BYTES || buf.len() + DIRECT_MAP_BYTES > self.chunk_bytes() {
            return self.read(handle, offset, buf);
        }
        // When to ask for a copy: `ReadCache`'s doc. (A copy is kept only once the view is.)
        let ask = match cache.next_read(self.id) {
            Ok(cached) => {
                let view = self.image.get().and_then(Option::as_ref);
                if let Some(n) = view.and_then(|v| self.read_directly(v, offset, buf, &cached)) {
                    return Ok(n);
                }
                cache.ask_for_copy()
            }
            Err(ask) => ask,
        };
        if !ask || self.image_view().is_none() {
            return self.read(handle, offset, buf);
        }
        self.read_mapped(handle, offset, buf, cache)
    }

    fn write(&self, handle: Handle, offset: u64, data: &[u8], append: bool) -> Result<u64, Errno> {
        let mut first = None;
        let mut done = 0;
        loop {
            let n = (data.len() - done).min(self.chunk_bytes());
            let mut e = Enc::new(op::WRITE);
            // The data's length ends the request; the data follows it in the area, copied
            // straight from the caller's buffer (the same bytes `Enc::bytes` would make).
            e.u64(handle)
                .u64(offset + done as u64)
                .bool(append)
                .u32(n as u32);
            let at = self.call_with(&e, &data[done..done + n], |area, slot, len| {
                let mut reply = [0u8; 8];
                if len < 8 {
                    return Err(Errno::EIO);
                }
                area.get(slot, 4, &mut reply);
                Ok(u64::from_le_bytes(reply))
            })?;
            first.get_or_insert(at);
            done += n;
            if done >= data.len() {
                return Ok(first.unwrap_or(offset));
            }
        }
    }

    fn fsync(&self, handle: Handle) -> Result<(), Errno> {
        let mut e = Enc::new(op::FSYNC);
        e.u64(handle);
        self.call(&e).map(drop)
    }

    fn ftruncate(&self, handle: Handle, size: u64) -> Result<(), Errno> {
        let mut e = Enc::new(op::FTRUNCATE);
        e.u64(handle).u64(size);
        self.call(&e).map(drop)
    }

    fn fstat(&self, handle: Handle) -> Result<Attr, Errno> {
        let mut e = Enc::new(op::FSTAT);
        e.u64(handle);
        decode(&self.call(&e)?, |d| d.attr())
    }

    /// The size from the word of the size board the daemon keeps for this file, asked for at
    /// the description's first call (a round trip, once); `u32::MAX` remembered when the board
    /// is full (then every call asks).
    fn end_of(&self, handle: Handle, watch: &AtomicU64) -> Result<u64, Errno> {
        let remembered = watch.load(Ordering::Relaxed);
        let index = if remembered >> 32 == u64::from(self.id) {
            remembered as u32
        } else {
            let mut e = Enc::new(op::SIZE_WATCH);
            e.u64(handle);
            let index = decode(&self.call(&e)?, |d| d.u64())? as u32;
            watch.store(
                u64::from(self.id) << 32 | u64::from(index),
                Ordering::Relaxed,
            );
            index
        };
        match self.area.size_word(index) {
            Some(word) => Ok(word.load(Ordering::Acquire)),
            None => Ok(self.fstat(handle)?.size),
        }
    }

    fn fsetattr(&self, handle: Handle, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
        let mut e = Enc::new(op::FSETATTR);
        e.u64(handle).setattr(change).bool(times_now);
        self.call(&e).map(drop)
    }

    fn readdir(&self, handle: Handle, cookie: u64, max: usize) -> Result<Vec<DirEntry>, Errno> {
        let mut e = Enc::new(op::READDIR);
        e.u64(handle)
            .u64(cookie)
            .u32(max.min(u32::MAX as usize) as u32);
        decode(&self.call(&e)?, |d| {
            let n = d.u32()?;
            (0..n).map(|_| d.entry()).collect()
        })
    }

    fn fallocate(&self, handle: Handle, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
        let mut e = Enc::new(op::FALLOCATE);
        e.u64(handle).u32(mode as u32).i64(offset).i64(len);
        self.call(&e).map(drop)
    }

    fn listing_end(&self, handle: Handle) -> Result<u64, Errno> {
        let mut e = Enc::new(op::LISTING_END);
        e.u64(handle);
        let reply = self.call(&e)?;
        Dec::new(&reply).u64().map_err(|_| Errno::EIO)
    }

    fn seek_hole(&self, handle: Handle, offset: u64, data: bool) -> Result<u64, Errno> {
        let mut e = Enc::new(op::SEEK_HOLE);
        e.u64(handle).u64(offset).bool(data);
        let reply = self.call(&e)?;
        Dec::new(&reply).u64().map_err(|_| Errno::EIO)
    }

    fn path_of(&self, handle: Handle) -> Result<Vec<u8>, Errno> {
        let mut e = Enc::new(op::PATH_OF);
        e.u64(handle);
        decode(&self.call(&e)?, |d| d.bytes().map(<[u8]>::to_vec))
    }

    fn data_map(
        &self,
        handle: Handle,
        start: u64,
        len: u64,
        max: usize,
    ) -> Result<Vec<DataExtent>, Errno> {
        let mut e = Enc::new(op::DATA_MAP);
        e.u64(handle)
            .u64(start)
            .u64(len)
            .u32(max.min(u32::MAX as usize) as u32);
        decode(&self.call(&e)?, |d| {
            let n = d.u32()?;
            (0..n)
                .map(|_| {
                    let (logical, physical, length) = (d.u64()?, d.u64()?, d.u64()?);
                    let flags = d.u8()?;
                    Ok(DataExtent {
                        logical,
                        physical,
                        length,
                        last: flags & 1 != 0,
                        pending: flags & 2 != 0,
                    })
                })
                .collect()
        })
    }

    fn truncate(&self, found: &Found, size: i64) -> Result<(), Errno> {
        let mut e = path_request(op::TRUNCATE, found);
        e.i64(size);
        self.call(&e).map(drop)
    }

    fn mkdir(&self, found: &Found, mode: u32, umask: u32) -> Result<(), Errno> {
        let mut e = path_request(op::MKDIR, found);
        e.u32(mode).u32(umask);
        self.call(&e).map(drop)
    }

    fn mknod(&self, found: &Found, mode: u32, rdev: u64, umask: u32) -> Result<Attr, Errno> {
        let mut e = path_request(op::MKNOD, found);
        e.u32(mode).u64(rdev).u32(umask);
        decode(&self.call(&e)?, |d| d.attr())
    }

    fn symlink(&self, target: &[u8], found: &Found) -> Result<(), Errno> {
        let mut e = path_request(op::SYMLINK, found);
        e.bytes(target);
        self.call(&e).map(drop)
    }

    fn readlink(&self, found: &Found) -> Result<Vec<u8>, Errno> {
        let e = path_request(op::READLINK, found);
        decode(&self.call(&e)?, |d| d.bytes().map(<[u8]>::to_vec))
    }

    fn unlink(&self, found: &Found) -> Result<(), Errno> {
        self.call(&path_request(op::UNLINK, found)).map(drop)
    }

    fn rmdir(&self, found: &Found, last: &[u8]) -> Result<(), Errno> {
        let mut e = path_request(op::RMDIR, found);
        e.bytes(last);
        self.call(&e).map(drop)
    }

    fn rename(&self, from: &Found, to: &Found, flags: u32) -> Result<(), Errno> {
        let mut e = path_request(op::RENAME, from);
        e.path_of(to).u32(flags);
        self.call(&e).map(drop)
    }

    fn link(&self, from: &Found, to: &Found) -> Result<(), Errno> {
        let mut e = path_request(op::LINK, from);
        e.path_of(to);
        self.call(&e).map(drop)
    }

    fn setattr(&self, found: &Found, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
        let mut e = path_request(op::SETATTR, found);
        e.setattr(change).bool(times_now);
        self.call(&e).map(drop)
    }

    fn statfs(&self) -> Result<Statfs, Errno> {
        decode(&self.call(&Enc::new(op::STATFS))?, |d| {
            Ok(Statfs {
                blocks: d.u64()?,
                blocks_free: d.u64()?,
                inodes: d.u64()?,
                inodes_free: d.u64()?,
            })
        })
    }

    fn sync_all(&self) -> Result<(), Errno> {
        self.call(&Enc::new(op::SYNC_ALL)).map(drop)
    }

    fn flink(&self, handle: Handle, to: &Found) -> Result<(), Errno> {
        let mut e = Enc::new(op::FLINK);
        e.u64(handle).path_of(to);
        self.call(&e).map(drop)
    }

    fn xattr(&self, target: XattrTarget<'_>, call: XattrCall<'_>) -> Result<Vec<u8>, Errno> {
        let mut e = match target {
            XattrTarget::Path(found) => path_request(op::XATTR, found),
            XattrTarget::Handle(handle) => {
                let mut e = Enc::new(op::FXATTR);
                e.u64(handle);
                e
            }
        };
        e.xattr_call(&call);
        decode(&self.call(&e)?, |d| d.bytes().map(<[u8]>::to_vec))
    }
}
