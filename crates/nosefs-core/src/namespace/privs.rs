//! Set-id bits and writes: a change of a regular file's data by anyone but root clears them
//! (Linux's `file_remove_privs`), checked with one load of the inode's mark, so writes to
//! ordinary files pay nothing more.

use super::perm::Cred;
use crate::error::Result;
use crate::fs::Fs;

impl Fs {
    /// [`Fs::write`] (`offset` given) or [`Fs::append`] by a caller other than the kernel's
    /// FUSE client: first the set-id bits the write clears for `cred` (Linux's
    /// `file_remove_privs`), which costs one load for a file without them.
    pub fn write_by(
        &self,
        ino: u64,
        offset: Option<u64>,
        data: &[u8],
        cred: impl FnOnce() -> Cred,
    ) -> Result<u64> {
        self.writable()?;
        let inode = self.inode(ino)?;
        if inode.has_setid() {
            self.drop_setid(ino, &cred())?;
        }
        let offset = self.write_at(&inode, offset, data)?;
        self.write_shadowed(ino, offset, data)?;
        Ok(offset)
    }

    /// Clears the set-id bits a change of `ino`'s data by `cred` clears; whether the mode
    /// changed.
    pub fn drop_setid(&self, ino: u64, cred: &Cred) -> Result<bool> {
        let attr = self.getattr(ino)?;
        let Some(mode) = super::perm::mode_after_write(&attr, cred) else {
            return Ok(false);
        };
        let change = super::SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        self.setattr(ino, &change)?;
        Ok(true)
    }
}
