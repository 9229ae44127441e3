//! The request and reply encoding in a slot's payload.
//!
//! A request is `op: u32` then the op's fields; a reply is `errno: i32` (0 for success) then
//! the result's fields. Integers are little-endian; byte strings are `len: u32` then the bytes;
//! an option is a `u8` tag (0 none, 1 some) then the value. Decoding never trusts its input:
//! a short or inconsistent message is [`Malformed`], which the daemon answers with EINVAL.

use nosefs_core::file::direct::DirectMap;
use nosefs_core::namespace::{Attr, DirEntry, SetAttr};
use nosefs_core::vfs::XattrCall;
use nosefs_core::vfs::{Found, OpenKind, Walked};
use nosefs_core::Errno;

/// Request op codes.
#[allow(missing_docs)]
pub mod op {
    pub const WALK: u32 = 1;
    pub const WALK_IN: u32 = 2;
    pub const OPEN: u32 = 3;
    pub const CLOSE: u32 = 4;
    pub const READ: u32 = 5;
    pub const WRITE: u32 = 6;
    pub const FSYNC: u32 = 7;
    pub const FTRUNCATE: u32 = 8;
    pub const FSTAT: u32 = 9;
    pub const FSETATTR: u32 = 10;
    pub const READDIR: u32 = 11;
    pub const FALLOCATE: u32 = 12;
    pub const TRUNCATE: u32 = 13;
    pub const MKDIR: u32 = 14;
    pub const MKNOD: u32 = 15;
    pub const SYMLINK: u32 = 16;
    pub const READLINK: u32 = 17;
    pub const UNLINK: u32 = 18;
    pub const RMDIR: u32 = 19;
    pub const RENAME: u32 = 20;
    pub const LINK: u32 = 21;
    pub const SETATTR: u32 = 22;
    pub const STATFS: u32 = 23;
    pub const SYNC_ALL: u32 = 24;
    pub const HOLD: u32 = 25;
    pub const CLAIM: u32 = 26;
    pub const BIND: u32 = 27;
    pub const NOP: u32 = 28;
    /// The client's credentials changed (setuid, setgroups, ...): the daemon reads them again
    /// from /proc itself (the client says only *that* they changed, never what they are).
    pub const RECRED: u32 = 29;
    /// lseek SEEK_DATA or SEEK_HOLE.
    pub const SEEK_HOLE: u32 = 30;
    /// Where a directory listing starting now ends.
    pub const LISTING_END: u32 = 31;
    /// An extended-attribute call on a path.
    pub const XATTR: u32 = 32;
    /// An extended-attribute call on an open description.
    pub const FXATTR: u32 = 33;
    /// A name for an open description (linkat with AT_EMPTY_PATH).
    pub const FLINK: u32 = 34;
    /// A walk and an open in one round trip (the daemon walks, then opens what it found).
    pub const OPEN_PATH: u32 = 35;
    /// A name in an open directory looked up and opened in one round trip.
    pub const OPEN_IN: u32 = 36;
    /// unlink of a name in an open directory, looked up there, in one round trip.
    pub const UNLINK_IN: u32 = 37;
    /// rename between names in open directories, looked up there, in one round trip.
    pub const RENAME_IN: u32 = 38;
    /// Where an open file's data is (FIEMAP).
    pub const DATA_MAP: u32 = 39;
    /// A path of an open description's inode now, from the root (`Fs::path_of`).
    pub const PATH_OF: u32 = 40;
    /// A word of the client's size board that the daemon keeps at an open file's size
    /// (`u32::MAX`: none left), and the size now.
    pub const SIZE_WATCH: u32 = 41;
    /// A loan of an open file's shadow (`nosefs_core::file::lent`) for a shared mapping made
    /// in the client: the reply is the loan's number, its memfd sent on the socket first.
    pub const SHADOW_LEND: u32 = 42;
    /// Pages a loan's mappings were stored to, into the file's data path; committed at once
    /// when asked (msync).
    pub const SHADOW_TAKE: u32 = 43;
    /// The last pages of a loan, which ends (munmap).
    pub const SHADOW_RETURN: u32 = 44;
    /// A read that also hands out a copy of the file's pieces around it, for reads the client
    /// makes itself from its view of the image (`nosefs_core::file::direct`): the data, then
    /// the watch (size and generation board word) for the file and the copy
    /// ([`Enc::direct_map`]).
    pub const READ_MAPPED: u32 = 45;
    /// A read-only descriptor of the image, for a client the image's owner trusts (its user
    /// owns the image, or is root): sent on the socket first; the reply is where the data
    /// zone lies (offset, bytes). EPERM for anyone else.
    pub const IMAGE_LEND: u32 = 46;
}

/// Bytes a READ_MAPPED reply keeps for its copy of the pieces behind the data.
pub const DIRECT_MAP_BYTES: usize = 48 + 24 * nosefs_core::file::direct::DIRECT_MAP_MAX_PIECES;

/// Most (first page, pages) runs one SHADOW_TAKE or SHADOW_RETURN carries.
pub const MAX_RUNS: usize = 2048;

/// A message that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl From<Malformed> for Errno {
    fn from(_: Malformed) -> Errno {
        Errno::EINVAL
    }
}

/// Builds a message.
#[derive(Debug, Default)]
pub struct Enc {
    /// The bytes so far.
    pub buf: Vec<u8>,
}

impl Enc {
    /// A message starting with `head` (an op code or an errno).
    pub fn new(head: u32) -> Enc {
        let mut e = Enc {
            buf: Vec::with_capacity(256),
        };
        e.u32(head);
        e
    }
    /// Appends a u8.
    pub fn u8(&mut self, v: u8) -> &mut Enc {
        self.buf.push(v);
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an i64.
    pub fn i64(&mut self, v: i64) -> &mut Enc {
        self.u64(v as u64)
    }
    /// Appends a byte string.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Enc {
        self.u32(u32::try_from(v.len()).expect("messages are bounded by the slot"));
        self.buf.extend_from_slice(v);
        self
    }
    /// Appends a bool.
    pub fn bool(&mut self, v: bool) -> &mut Enc {
        self.u8(v as u8)
    }
    /// Appends attributes.
    pub fn attr(&mut self, a: &Attr) -> &mut Enc {
        self.u64(a.ino)
            .u32(a.mode)
            .u32(a.nlink)
            .u32(a.uid)
            .u32(a.gid);
        self.u64(a.size).u32(a.rdev);
        self.i64(a.atime_ns)
            .i64(a.mtime_ns)
            .i64(a.ctime_ns)
            .u64(a.blocks)
            .bool(a.acl)
    }
    /// Appends an extended-attribute call: kind (0 get, 1 list, 2 set, 3 remove), name, value,
    /// flags.
    pub fn xattr_call(&mut self, call: &XattrCall<'_>) -> &mut Enc {
        let (kind, name, value, flags): (u8, &[u8], &[u8], i32) = match *call {
            XattrCall::Get(name) => (0, name, &[], 0),
            XattrCall::List => (1, &[], &[], 0),
            XattrCall::Set(name, value, flags) => (2, name, value, flags),
            XattrCall::Remove(name) => (3, name, &[], 0),
        };
        self.u8(kind).bytes(name).bytes(value).u32(flags as u32)
    }
    /// Appends an optional u64-sized value.
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Enc {
        match v {
            Some(v) => self.u8(1).u64(v),
            None => self.u8(0),
        }
    }
    /// Appends a change of attributes.
    pub fn setattr(&mut self, s: &SetAttr) -> &mut Enc {
        self.opt_u64(s.mode.map(u64::from));
        self.opt_u64(s.uid.map(u64::from));
        self.opt_u64(s.gid.map(u64::from));
        self.opt_u64(s.atime_ns.map(|t| t as u64));
        self.opt_u64(s.mtime_ns.map(|t| t as u64));
        self.opt_u64(s.size)
    }
    /// Appends a path for the daemon to walk again: the logical path, whether it ended with a
    /// slash, and whether it named a directory itself (`d/.`, `..`), which the logical path
    /// alone no longer says (rename and rmdir of `.` must fail as the kernel's do).
    pub fn path_of(&mut self, f: &Found) -> &mut Enc {
        self.bytes(&f.path)
            .bool(f.trailing_slash)
            .bool(f.name == b".")
    }
    /// Appends a resolved path.
    pub fn found(&mut self, f: &Found) -> &mut Enc {
        self.u64(f.parent).attr(&f.parent_attr).bytes(&f.name);
        match &f.attr {
            Some(a) => self.u8(1).attr(a),
            None => self.u8(0),
        };
        self.bytes(&f.path).bool(f.trailing_slash)
    }
    /// Appends a walk's outcome.
    pub fn walked(&mut self, w: &Walked) -> &mut Enc {
        match w {
            Walked::Found(f) => self.u8(0).found(f),
            Walked::Outside(p) => self.u8(1).bytes(p),
        }
    }
    /// Appends an open kind.
    pub fn kind(&mut self, k: OpenKind) -> &mut Enc {
        self.u8(match k {
            OpenKind::File => 0,
            OpenKind::Dir => 1,
            OpenKind::Path => 2,
        })
    }
    /// Appends a directory entry.
    pub fn entry(&mut self, e: &DirEntry) -> &mut Enc {
        self.bytes(&e.name)
            .u64(e.ino)
            .u32(e.file_type)
            .u64(e.cookie)
    }
    /// Appends the tail of a READ_MAPPED reply: the file's word of the boards (`u32::MAX`:
    /// none), then whether a copy of its pieces follows, and the copy (at most
    /// [`DIRECT_MAP_BYTES`] in all).
    pub fn direct_map(&mut self, index: u32, map: Option<&DirectMap>) -> &mut Enc {
        self.u32(index).bool(map.is_some());
        if let Some(m) = map {
            self.u64(m.generation).u64(m.start).u64(m.end);
            self.u64(m.access_holds_ns);
            self.u32(m.pieces.len() as u32);
            for &(offset, addr, len) in &m.pieces {
                self.u64(offset).u64(addr).u64(len);
            }
        }
        self
    }
}

/// Reads a message.
#[derive(Debug)]
pub struct Dec<'a> {
    rest: &'a [u8],
}

impl<'a> Dec<'a> {
    /// Reads `buf`.
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec { rest: buf }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.rest.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }
    /// A u8.
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    /// An i32.
    pub fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(self.u32()? as i32)
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// An i64.
    pub fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(self.u64()? as i64)
    }
    /// A bool.
    pub fn bool(&mut self) -> Result<bool, Malformed> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed),
        }
    }
    /// A byte string (borrowed).
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Attributes.
    pub fn attr(&mut self) -> Result<Attr, Malformed> {
        Ok(Attr {
            ino: self.u64()?,
            mode: self.u32()?,
            nlink: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
            size: self.u64()?,
            rdev: self.u32()?,
            atime_ns: self.i64()?,
            mtime_ns: self.i64()?,
            ctime_ns: self.i64()?,
            blocks: self.u64()?,
            acl: self.bool()?,
        })
    }
    /// An extended-attribute call (borrowing its name and value).
    pub fn xattr_call(&mut self) -> Result<XattrCall<'a>, Malformed> {
        let kind = self.u8()?;
        let (name, value, flags) = (self.bytes()?, self.bytes()?, self.i32()?);
        match kind {
            0 => Ok(XattrCall::Get(name)),
            1 => Ok(XattrCall::List),
            2 => Ok(XattrCall::Set(name, value, flags)),
            3 => Ok(XattrCall::Remove(name)),
            _ => Err(Malformed),
        }
    }
    fn opt_u64(&mut self) -> Result<Option<u64>, Malformed> {
        Ok(match self.u8()? {
            0 => None,
            1 => Some(self.u64()?),
            _ => return Err(Malformed),
        })
    }
    fn opt_u32(&mut self) -> Result<Option<u32>, Malformed> {
        self.opt_u64()?
            .map(|v| u32::try_from(v).map_err(|_| Malformed))
            .transpose()
    }
    /// A change of attributes.
    pub fn setattr(&mut self) -> Result<SetAttr, Malformed> {
        Ok(SetAttr {
            mode: self.opt_u32()?,
            uid: self.opt_u32()?,
            gid: self.opt_u32()?,
            atime_ns: self.opt_u64()?.map(|t| t as i64),
            mtime_ns: self.opt_u64()?.map(|t| t as i64),
            size: self.opt_u64()?,
        })
    }
    /// A resolved path.
    pub fn found(&mut self) -> Result<Found, Malformed> {
        Ok(Found {
            parent: self.u64()?,
            parent_attr: self.attr()?,
            name: self.bytes()?.to_vec(),
            attr: match self.u8()? {
                0 => None,
                1 => Some(self.attr()?),
                _ => return Err(Malformed),
            },
            path: self.bytes()?.to_vec(),
            trailing_slash: self.bool()?,
        })
    }
    /// A walk's outcome.
    pub fn walked(&mut self) -> Result<Walked, Malformed> {
        match self.u8()? {
            0 => Ok(Walked::Found(self.found()?)),
            1 => Ok(Walked::Outside(self.bytes()?.to_vec())),
            _ => Err(Malformed),
        }
    }
    /// An open kind.
    pub fn kind(&mut self) -> Result<OpenKind, Malformed> {
        match self.u8()? {
            0 => Ok(OpenKind::File),
            1 => Ok(OpenKind::Dir),
            2 => Ok(OpenKind::Path),
            _ => Err(Malformed),
        }
    }
    /// A directory entry.
    pub fn entry(&mut self) -> Result<DirEntry, Malformed> {
        Ok(DirEntry {
            name: self.bytes()?.to_vec(),
            ino: self.u64()?,
            file_type: self.u32()?,
            cookie: self.u64()?,
        })
    }
    /// The tail of a READ_MAPPED reply ([`Enc::direct_map`]).
    pub fn direct_map(&mut self) -> Result<(u32, Option<DirectMap>), Malformed> {
        let index = self.u32()?;
        if !self.bool()? {
            return Ok((index, None));
        }
        let (generation, start, end) = (self.u64()?, self.u64()?, self.u64()?);
        let access_holds_ns = self.u64()?;
        let n = self.u32()? as usize;
        if n > nosefs_core::file::direct::DIRECT_MAP_MAX_PIECES {
            return Err(Malformed);
        }
        let pieces = (0..n)
            .map(|_| Ok((self.u64()?, self.u64()?, self.u64()?)))
            .collect::<Result<Vec<_>, Malformed>>()?;
        let map =
            DirectMap::new(generation, (start, end), pieces, access_holds_ns).ok_or(Malformed)?;
        Ok((index, Some(map)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_of_pieces_fits_its_room_and_decodes_as_made() {
        let max = nosefs_core::file::direct::DIRECT_MAP_MAX_PIECES as u64;
        let map = DirectMap::new(
            7 << 47 | 12_345,
            (0, u64::MAX),
            (0..max).map(|k| (k * 8192, k * 4096 + 17, 4096)).collect(),
            86_400_000_000_000,
        )
        .unwrap();
        let mut e = Enc::default();
        e.direct_map(3, Some(&map));
        assert!(e.buf.len() <= DIRECT_MAP_BYTES, "{} bytes", e.buf.len());
        assert_eq!(Dec::new(&e.buf).direct_map(), Ok((3, Some(map))));
        let mut none = Enc::default();
        none.direct_map(u32::MAX, None);
        assert_eq!(Dec::new(&none.buf).direct_map(), Ok((u32::MAX, None)));
        // Overlapping pieces, or more than a copy holds, do not decode.
        let mut bad = Enc::default();
        bad.u32(0).bool(true).u64(0).u64(0).u64(100).u64(0).u32(2);
        bad.u64(0).u64(0).u64(50).u64(40).u64(4096).u64(10);
        assert_eq!(Dec::new(&bad.buf).direct_map(), Err(Malformed));
        let mut many = Enc::default();
        many.u32(0)
            .bool(true)
            .u64(0)
            .u64(0)
            .u64(100)
            .u64(0)
            .u32(max as u32 + 1);
        assert_eq!(Dec::new(&many.buf).direct_map(), Err(Malformed));
    }

    fn attr(ino: u64) -> Attr {
        Attr {
            ino,
            mode: 0o100644,
            nlink: 1,
            uid: 7,
            gid: 8,
            size: 1 << 40,
            rdev: 3,
            atime_ns: -5,
            mtime_ns: 6,
            ctime_ns: i64::MAX,
            blocks: 9,
            acl: true,
        }
    }

    #[test]
    fn values_round_trip() {
        let found = Found {
            parent: 1,
            parent_attr: attr(1),
            name: b"x".to_vec(),
            attr: Some(attr(9)),
            path: b"/mnt/n/x".to_vec(),
            trailing_slash: true,
        };
        let change = SetAttr {
            mode: Some(0o4755),
            atime_ns: Some(-1),
            size: Some(10),
            ..SetAttr::default()
        };
        let mut e = Enc::new(op::RENAME);
        e.walked(&Walked::Found(found.clone()))
            .walked(&Walked::Outside(b"/etc".to_vec()))
            .setattr(&change)
            .kind(OpenKind::Dir);
        let mut d = Dec::new(&e.buf);
        assert_eq!(d.u32(), Ok(op::RENAME));
        assert_eq!(d.walked(), Ok(Walked::Found(found)));
        assert_eq!(d.walked(), Ok(Walked::Outside(b"/etc".to_vec())));
        assert_eq!(d.setattr(), Ok(change));
        assert_eq!(d.kind(), Ok(OpenKind::Dir));
        assert_eq!(d.u8(), Err(Malformed));
    }

    #[test]
    fn truncated_and_lying_messages_are_malformed() {
        let mut e = Enc::new(op::WALK);
        e.bytes(b"/mnt/n/a/b");
        for cut in 0..e.buf.len() {
            let mut d = Dec::new(&e.buf[..cut]);
            let r = d.u32().and_then(|_| d.bytes());
            assert_eq!(r, Err(Malformed), "cut at {cut}");
        }
        let mut lying = Enc::new(op::WALK);
        lying.u32(u32::MAX);
        let mut d = Dec::new(&lying.buf);
        d.u32().unwrap();
        assert_eq!(d.bytes(), Err(Malformed));
    }
}
