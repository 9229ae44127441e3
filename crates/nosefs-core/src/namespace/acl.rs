//! POSIX ACLs (POSIX.1e draft 17, as Linux implements them in `fs/posix_acl.c`), kept as the
//! extended attributes `system.posix_acl_access` and `system.posix_acl_default` in the kernel's
//! value format, which is what `setfacl` writes and what FUSE passes:
//!
//! | offset | size | field     | meaning                |
//! |-------:|-----:|-----------|------------------------|
//! |      0 |    4 | `version` | 2                      |
//!
//! then entries of 8 bytes: `tag` (u16), `perm` (u16, rwx bits), `id` (u32: a uid for `USER`, a
//! gid for `GROUP`, else unused), sorted by tag, then id.
//!
//! Pure functions of the ACL, the attributes and the caller, like [`super::perm`]: parsing and
//! validation, the access check (`posix_acl_permission`), what a new inode inherits from its
//! directory's default ACL (`posix_acl_create`), and how a chmod rewrites an ACL
//! (`posix_acl_chmod`).

use super::perm::Cred;
use super::Attr;
use crate::error::{Errno, Result};

/// The access ACL's attribute name.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's attribute name (directories only).
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
/// The owner's entry.
pub const USER_OBJ: u16 = 0x01;
/// A named user's entry.
pub const USER: u16 = 0x02;
/// The owning group's entry.
pub const GROUP_OBJ: u16 = 0x04;
/// A named group's entry.
pub const GROUP: u16 = 0x08;
/// The mask: the most any group-class entry grants.
pub const MASK: u16 = 0x10;
/// Everyone else's entry.
pub const OTHER: u16 = 0x20;

/// Most entries an ACL may hold (ext4 allows about as many in one block).
pub const MAX_ENTRIES: usize = 1024;

/// One ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// One of the tag constants.
    pub tag: u16,
    /// Read (4), write (2), execute (1).
    pub perm: u16,
    /// User or group id, for `USER` and `GROUP`.
    pub id: u32,
}

/// A validated ACL: sorted, with the three required entries, and a mask when there are named
/// entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<AclEntry>,
}

impl Acl {
    /// Parses and validates the kernel's value format; EINVAL for anything malformed, as
    /// `posix_acl_from_xattr` and `posix_acl_valid` answer.
    pub fn parse(value: &[u8]) -> Result<Acl> {
        let invalid = || Errno::EINVAL.into();
        if value.len() < 4 || (value.len() - 4) % 8 != 0 {
            return Err(invalid());
        }
        if u32::from_le_bytes(value[..4].try_into().expect("4 bytes")) != VERSION {
            return Err(Errno(libc::EOPNOTSUPP).into());
        }
        let entries: Vec<AclEntry> = value[4..]
            .chunks_exact(8)
            .map(|c| AclEntry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        if entries.is_empty() || entries.len() > MAX_ENTRIES {
            return Err(invalid());
        }
        let acl = Acl { entries };
        acl.validate().map_err(|_| invalid())?;
        Ok(acl)
    }

    /// The kernel's value format.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 8 * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// `posix_acl_valid`: each of USER_OBJ, GROUP_OBJ and OTHER once, at most one MASK, which
    /// is required with named entries; named entries sorted by id without repeats; perms rwx.
    fn validate(&self) -> std::result::Result<(), ()> {
        let mut last_tag = 0u16;
        let mut last_id: Option<u32> = None;
        let (mut named, mut mask) = (false, false);
        for e in &self.entries {
            if e.perm & !7 != 0 || e.tag < last_tag {
                return Err(());
            }
            match e.tag {
                USER | GROUP => {
                    if e.tag != last_tag {
                        last_id = None;
                    }
                    if last_id.is_some_and(|id| id >= e.id) {
                        return Err(());
                    }
                    last_id = Some(e.id);
                    named = true;
                }
                USER_OBJ | GROUP_OBJ | MASK | OTHER => {
                    if e.tag == last_tag {
                        return Err(());
                    }
                    mask |= e.tag == MASK;
                }
                _ => return Err(()),
            }
            last_tag = e.tag;
        }
        let has = |tag| self.entries.iter().any(|e| e.tag == tag);
        if !has(USER_OBJ) || !has(GROUP_OBJ) || !has(OTHER) || (named && !mask) {
            return Err(());
        }
        Ok(())
    }

    fn perm_of(&self, tag: u16) -> Option<u32> {
        self.entries
            .iter()
            .find(|e| e.tag == tag)
            .map(|e| u32::from(e.perm))
    }

    /// The permission bits the mode carries for this ACL: owner from USER_OBJ, group from the
    /// mask (or GROUP_OBJ without one), other from OTHER.
    pub fn mode_bits(&self) -> u32 {
        let owner = self.perm_of(USER_OBJ).unwrap_or(0);
        let group = self
            .perm_of(MASK)
            .or_else(|| self.perm_of(GROUP_OBJ))
            .unwrap_or(0);
        let other = self.perm_of(OTHER).unwrap_or(0);
        (owner << 6) | (group << 3) | other
    }

    /// Whether the mode says all the ACL does (only the three required entries): then no ACL
    /// is stored, only the mode (`posix_acl_equiv_mode`).
    pub fn is_equivalent_to_mode(&self) -> bool {
        self.entries.len() == 3
    }

    /// `posix_acl_permission`: whether the ACL grants `mask` (rwx bits) to `cred` on `attr`.
    /// The superuser is decided by the caller, before.
    pub fn permits(&self, attr: &Attr, cred: &Cred, want: u32) -> bool {
        let granted = |perm: u32| perm & want == want;
        let mask = self.perm_of(MASK).unwrap_or(7);
        let mut found_group = false;
        for e in &self.entries {
            let perm = u32::from(e.perm);
            match e.tag {
                USER_OBJ if attr.uid == cred.uid => return granted(perm),
                USER if e.id == cred.uid => return granted(perm & mask),
                GROUP_OBJ if cred.in_group(attr.gid) => {
                    found_group = true;
                    if granted(perm & mask) {
                        return true;
                    }
                }
                GROUP if cred.in_group(e.id) => {
                    found_group = true;
                    if granted(perm & mask) {
                        return true;
                    }
                }
                OTHER if !found_group => return granted(perm),
                _ => {}
            }
        }
        false
    }

    /// `posix_acl_chmod`: the ACL after a chmod to `mode`: the owner, mask (or owning group
    /// without a mask) and other entries take the mode's bits.
    pub fn chmod(&self, mode: u32) -> Acl {
        self.with_mode_entries(mode, |_, bits| bits)
    }

    /// A copy whose owner, mask (or owning group without a mask) and other entries are
    /// `change(their perm, the mode's bits for them)`; the named entries are kept.
    fn with_mode_entries(&self, mode: u32, change: impl Fn(u16, u16) -> u16) -> Acl {
        let has_mask = self.perm_of(MASK).is_some();
        let mut acl = self.clone();
        for e in &mut acl.entries {
            let bits = match e.tag {
                USER_OBJ => (mode >> 6) & 7,
                MASK => (mode >> 3) & 7,
                GROUP_OBJ if !has_mask => (mode >> 3) & 7,
                OTHER => mode & 7,
                _ => continue,
            } as u16;
            e.perm = change(e.perm, bits);
        }
        acl
    }

    /// `posix_acl_create_masq`: the access ACL a new inode created with permission bits `mode`
    /// inherits from this default ACL, and the bits its mode gets. `None` for the ACL when the
    /// mode says everything it would.
    pub fn inherit(&self, mode: u32) -> (Option<Acl>, u32) {
        let acl = self.with_mode_entries(mode, |perm, bits| perm & bits);
        let bits = acl.mode_bits() | (mode & !0o777);
        if acl.is_equivalent_to_mode() {
            return (None, bits);
        }
        (Some(acl), bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smallvec::SmallVec;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: SmallVec::from_slice(groups),
        }
    }

    fn file(mode: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            mode: 0o100000 | mode,
            uid,
            gid,
            ..Attr::default()
        }
    }

    const NAMED: &[(u16, u16, u32)] = &[
        (USER_OBJ, 6, 0),
        (USER, 4, 1001),
        (USER, 6, 1002),
        (GROUP_OBJ, 4, 0),
        (GROUP, 2, 500),
        (MASK, 6, 0),
        (OTHER, 0, 0),
    ];

    #[test]
    fn a_valid_acl_round_trips_and_sets_the_mode() {
        let value = acl(NAMED);
        let parsed = Acl::parse(&value).unwrap();
        assert_eq!(parsed.encode(), value);
        assert_eq!(parsed.mode_bits(), 0o660);
        assert!(!parsed.is_equivalent_to_mode());
        let minimal = Acl::parse(&acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 1, 0)]));
        assert!(minimal.as_ref().unwrap().is_equivalent_to_mode());
        assert_eq!(minimal.unwrap().mode_bits(), 0o751);
    }

    #[test]
    fn malformed_acls_are_einval() {
        let bad: &[&[(u16, u16, u32)]] = &[
            &[(USER_OBJ, 6, 0), (GROUP_OBJ, 4, 0)], // no OTHER
            &[
                (USER_OBJ, 6, 0),
                (USER, 4, 5),
                (GROUP_OBJ, 4, 0),
                (OTHER, 0, 0),
            ], // no mask
            &[(GROUP_OBJ, 4, 0), (USER_OBJ, 6, 0), (OTHER, 0, 0)], // unsorted
            &[
                (USER_OBJ, 6, 0),
                (USER, 4, 5),
                (USER, 4, 5),
                (GROUP_OBJ, 4, 0),
                (MASK, 7, 0),
                (OTHER, 0, 0),
            ],
            &[(USER_OBJ, 8, 0), (GROUP_OBJ, 4, 0), (OTHER, 0, 0)], // perm bits
            &[
                (USER_OBJ, 6, 0),
                (0x40, 4, 0),
                (GROUP_OBJ, 4, 0),
                (OTHER, 0, 0),
            ],
        ];
        for entries in bad {
            let e = Acl::parse(&acl(entries)).unwrap_err();
            assert_eq!(e.errno(), Errno::EINVAL, "{entries:?}");
        }
        assert!(Acl::parse(&[2, 0, 0, 0, 1]).is_err());
        assert!(Acl::parse(&[]).is_err());
    }

    #[test]
    fn permission_follows_the_entry_that_matches_first() {
        let parsed = Acl::parse(&acl(NAMED)).unwrap();
        let f = file(0o660, 1000, 100);
        assert!(parsed.permits(&f, &cred(1000, 1, &[]), 6), "owner");
        assert!(parsed.permits(&f, &cred(1001, 1, &[]), 4), "named user r");
        assert!(
            !parsed.permits(&f, &cred(1001, 1, &[]), 2),
            "named user not w"
        );
        assert!(parsed.permits(&f, &cred(1002, 1, &[]), 6), "named user rw");
        assert!(parsed.permits(&f, &cred(7, 100, &[]), 4), "owning group");
        assert!(parsed.permits(&f, &cred(7, 1, &[500]), 2), "named group w");
        assert!(
            !parsed.permits(&f, &cred(7, 1, &[500]), 4),
            "named group not r"
        );
        assert!(!parsed.permits(&f, &cred(7, 1, &[]), 4), "other: nothing");
        // The mask limits named entries.
        let masked = parsed.chmod(0o640);
        assert!(!masked.permits(&f, &cred(1002, 1, &[]), 6));
        assert!(masked.permits(&f, &cred(1002, 1, &[]), 4));
        assert_eq!(masked.mode_bits(), 0o640);
    }

    #[test]
    fn a_new_inode_inherits_the_default_acl_masked_by_its_mode() {
        let default = Acl::parse(&acl(NAMED)).unwrap();
        let (access, bits) = default.inherit(0o644);
        let access = access.expect("named entries keep an ACL");
        assert_eq!(bits, 0o640);
        assert_eq!(access.perm_of(MASK), Some(4));
        assert_eq!(access.perm_of(USER_OBJ), Some(6));
        let plain =
            Acl::parse(&acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 5, 0)])).unwrap();
        assert_eq!(plain.inherit(0o666), (None, 0o644));
        assert_eq!(plain.inherit(0o2777).1, 0o2755, "special bits kept");
    }
}
