//! The requests: [`Filesystem`] for [`NoseFuse`], each one call of the core's API.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use nosefs_core::file::holes::Seek;
use nosefs_core::format::pinode;
use nosefs_core::namespace::{Attr, RenameFlags, SetAttr, XattrMode};

use crate::convert::{
    errno, file_attr, kind, reply_attr, reply_empty, reply_xattr, request_cred, set_time,
};
use crate::{NoseFuse, TTL};

impl Filesystem for NoseFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The kernel enforces ACLs (it reads them with getxattr and caches them) and leaves the
        // umask to us (DONT_MASK); a kernel without them keeps applying the umask itself, which
        // the core applying it again does not change.
        let _ = config.add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK);
        // NFS-style export: open_by_handle_at of an inode the kernel has forgotten looks up "."
        // in it (any file type) and ".." of a directory; inode numbers are never reused, so
        // generation 0 names one inode forever.
        let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        Ok(())
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.fs().getxattr(ino.0, name.as_bytes()));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.fs().listxattr(ino.0));
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        if position != 0 {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        // An access ACL set by someone outside the file's group drops set-group-id, which the
        // kernel's FUSE client leaves to the server.
        let name = name.as_bytes();
        if req.uid() != 0 {
            match nosefs_core::vfs::xattr::acl_drops_setgid(
                self.fs(),
                &request_cred(req),
                ino.0,
                name,
            ) {
                Ok(true) => self.attributes_changed(ino.0),
                Ok(false) => {}
                Err(e) => return reply.error(Errno::from_i32(e.0)),
            }
        }
        let result = XattrMode::from_flags(flags)
            .and_then(|mode| self.fs().setxattr(ino.0, name, value, mode));
        reply_empty(reply, result);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs().removexattr(ino.0, name.as_bytes()));
    }

    fn destroy(&mut self) {
        if let Some(fs) = self.fs.take() {
            fs.stop_compactor();
            match Arc::try_unwrap(fs) {
                Ok(fs) => drop(fs.unmount()),
                Err(shared) => drop(shared.sync_all()),
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if name.as_bytes() == b"." {
            // Only the kernel's export code asks this (of an inode it no longer holds), and of
            // any file type.
            return self.reply_entry(reply, self.fs().getattr(parent.0));
        }
        self.view.note_dir(parent.0);
        match self.fs().lookup(parent.0, name.as_bytes()) {
            // A negative entry (inode 0) the kernel may cache: creating a file looks its name up
            // first, and every later change to that name goes through this mount, which
            // invalidates it.
            Err(e) if e.errno() == nosefs_core::Errno::ENOENT => {
                let mut attr = file_attr(&Attr::default());
                attr.ino = INodeNo(0);
                reply.entry(&TTL, &attr, Generation(0));
            }
            result => self.reply_entry(reply, result),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.view.note_attrs(ino.0);
        reply_attr(reply, self.fs().getattr(ino.0));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = SetAttr {
            mode,
            uid,
            gid,
            atime_ns: set_time(atime),
            mtime_ns: set_time(mtime),
            size,
        };
        if size.is_some() && mode.is_none() {
            if let Err(e) = self.remove_privs(req, ino.0) {
                reply.error(Errno::from_i32(e.0));
                return;
            }
        }
        self.view.note_attrs(ino.0);
        reply_attr(reply, self.fs().setattr(ino.0, &change));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs().readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.view.note_dir(parent.0);
        let (owner, perm) = self.new_owner(req, parent.0, mode, umask);
        let mode = (mode & pinode::S_IFMT) | perm;
        let result = if mode & pinode::S_IFMT == pinode::S_IFREG {
            self.fs()
                .create(parent.0, name.as_bytes(), perm, owner, true)
        } else {
            self.fs()
                .mknod(parent.0, name.as_bytes(), mode, rdev, owner)
        };
        self.reply_entry(reply, result);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.view.note_dir(parent.0);
        let (owner, perm) = self.new_owner(req, parent.0, pinode::S_IFDIR | (mode & 0o7777), umask);
        self.reply_entry(
            reply,
            self.fs().mkdir(parent.0, name.as_bytes(), perm, owner),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs().unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs().rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        self.view.note_dir(parent.0);
        let (owner, _) = self.new_owner(req, parent.0, pinode::S_IFLNK | 0o777, 0);
        self.reply_entry(
            reply,
            self.fs()
                .symlink(parent.0, link_name.as_bytes(), target, owner),
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        // The kernel checked CAP_MKNOD for a whiteout (overlayfs makes them).
        let whiteout = flags.contains(fuser::RenameFlags::RENAME_WHITEOUT);
        let flags = RenameFlags {
            noreplace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
            whiteout: whiteout.then_some(nosefs_core::namespace::Owner {
                uid: req.uid(),
                gid: req.gid(),
                umask: 0,
            }),
        };
        self.view.note_dir(newparent.0); // the kernel moves its entry there
        let result = self.fs().rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags,
        );
        reply_empty(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.view.note_dir(newparent.0);
        self.reply_entry(
            reply,
            self.fs().link(ino.0, newparent.0, newname.as_bytes()),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.view.forget(ino.0, nlookup);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Counted, so that a file unlinked while open lives on until its release.
        match self.fs().open(ino.0) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.fs().close(ino.0));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Before the read: a write racing it is either seen by it or stored into its pages.
        self.view.note_paged(ino.0);
        let mut buf = vec![0u8; size as usize];
        match self.fs().read(ino.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The kernel keeps the bytes it writes through in its cache.
        self.view.note_paged(ino.0);
        // The kernel's FUSE client clears set-group-id only with group-execute set before a
        // write; the frontend clears what tmpfs and ext4 clear.
        let result = self
            .remove_privs(req, ino.0)
            .map_err(nosefs_core::Error::from)
            .and_then(|()| self.fs().write(ino.0, offset, data));
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() promises nothing about durability (fsync does), and a file's open count ends
        // at release, so flush has nothing to do. Answering ENOSYS tells the kernel so once: it
        // stops sending FLUSH and every later close() saves a round trip, which dominates
        // create+close through FUSE.
        reply.error(Errno::ENOSYS);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.fs().fsync(ino.0));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory operations are durable when they return.
        reply_empty(reply, self.fs().getattr(ino.0).map(drop));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The handle names where the listing ends (see `NoseFuse::listing_end`).
        match self.fs().getattr(ino.0) {
            Ok(a) if a.is_dir() => match self.fs().listing_end(ino.0) {
                // Counted, so a removed directory answers getattr until its release.
                Ok(end) => match self.fs().open(ino.0) {
                    Ok(()) => {
                        let id = self
                            .next_listing
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        self.listings.lock().insert(id, end);
                        reply.opened(FileHandle(id), FopenFlags::empty())
                    }
                    Err(e) => reply.error(errno(e)),
                },
                Err(e) => reply.error(errno(e)),
            },
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let end = match self.listing_end(fh, ino.0, offset) {
            Ok(end) => end,
            Err(e) => return reply.error(errno(e)),
        };
        let result = self.fs().readdir(ino.0, offset, |e| {
            if e.cookie >= end {
                return false; // added after the directory was opened: the listing ends here
            }
            let name = OsStr::from_bytes(&e.name);
            !reply.add(INodeNo(e.ino), e.cookie, kind(e.file_type), name)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let fs = self.fs();
        let end = match self.listing_end(fh, ino.0, offset) {
            Ok(end) => end,
            Err(e) => return reply.error(errno(e)),
        };
        self.view.note_dir(ino.0);
        let result = fs.readdir(ino.0, offset, |e| {
            if e.cookie >= end {
                return false;
            }
            // The kernel takes a lookup reference on every entry but "." and "..".
            if e.name != b"." && e.name != b".." {
                self.view.note_inode(e.ino);
            }
            // A name removed since the listing was read is skipped, as readdir would.
            let Ok(a) = fs.getattr(e.ino) else {
                return true;
            };
            let name = OsStr::from_bytes(&e.name);
            !reply.add(
                INodeNo(e.ino),
                e.cookie,
                name,
                &TTL,
                &file_attr(&a),
                Generation(0),
            )
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.listings.lock().remove(&fh.0);
        let _ = self.fs().close(ino.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let fs = self.fs();
        let blocks = fs.image().geometry().data_block_count();
        let free = fs.free_data_blocks();
        let (used, free_pinodes) = fs.pinode_usage();
        reply.statfs(
            blocks,
            free,
            free,
            used + free_pinodes,
            free_pinodes,
            4096,
            255,
            4096,
        );
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let (Ok(offset), Ok(length)) = (i64::try_from(offset), i64::try_from(length)) else {
            reply.error(Errno::EINVAL);
            return;
        };
        // The kernel clears no set-id bit before a fallocate: the frontend does, as ext4 and
        // tmpfs do (file_modified).
        let result = self
            .remove_privs(req, ino.0)
            .and_then(|()| nosefs_core::vfs::fallocate(self.fs(), ino.0, mode, offset, length));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.0)),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself; holes are ours to find.
        let what = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        let Ok(offset) = u64::try_from(offset) else {
            reply.error(Errno::ENXIO);
            return;
        };
        match self.fs().seek(ino.0, offset, what) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel has checked the mode bits already.
        reply_empty(reply, self.fs().getattr(ino.0).map(drop));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.view.note_dir(parent.0);
        let (owner, perm) = self.new_owner(req, parent.0, pinode::S_IFREG | (mode & 0o7777), umask);
        let exclusive = flags & libc::O_EXCL != 0;
        let created = self
            .fs()
            .create(parent.0, name.as_bytes(), perm, owner, exclusive);
        self.open_created(created, reply);
    }
    /// O_TMPFILE (FUSE_TMPFILE, served by our patched fuser): a file with no name in `parent`,
    /// opened at once, freed at its last release unless a link (`linkat` with AT_EMPTY_PATH,
    /// or through /proc/self/fd) names it first. The kernel has checked write and search
    /// permission on `parent` and keeps O_EXCL files unlinkable itself; the core refuses
    /// those too.
    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (owner, perm) = self.new_owner(req, parent.0, pinode::S_IFREG | (mode & 0o7777), umask);
        let linkable = flags & libc::O_EXCL == 0;
        let created = self.fs().create_tmpfile(parent.0, perm, owner, linkable);
        self.open_created(created, reply);
    }
}
