//! [`CachePadded`]: a value alone on its cache lines.
//!
//! Per-CPU pools, per-log locks and counters sit in arrays; packed, two CPUs working on their
//! own elements still write the same cache line, which then moves between them on every
//! operation (false sharing). 128 bytes, not 64: the adjacent-line prefetcher pulls lines in
//! pairs, so a neighbour one line away still interferes.

/// `T`, aligned (and so padded) to 128 bytes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::CachePadded;

    #[test]
    fn neighbours_never_share_a_line() {
        let v: Vec<CachePadded<parking_lot::Mutex<()>>> =
            (0..4).map(|_| Default::default()).collect();
        let a = &*v[0] as *const _ as usize;
        let b = &*v[1] as *const _ as usize;
        assert!(b - a >= 128);
        assert_eq!(a % 128, 0);
    }
}
