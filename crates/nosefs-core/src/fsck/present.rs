//! Which records of a table fsck reads: those that share a byte with a page of the image file
//! that holds data.
//!
//! mkfs leaves the tables as holes (the file is sparse), and a hole reads as zeros: a free
//! pinode, an empty bucket, a free extent, clear bitmap bits. Reading one through the mapping,
//! though, has tmpfs allocate the page, so a check of every slot of a 16 GiB image made its file
//! take 433 MiB more memory, and on a full tmpfs killed fsck with SIGBUS. The runs come from
//! `SEEK_DATA` and `SEEK_HOLE` ([`crate::pmem::Region::data_runs`]); where they cannot be known
//! every record is read, as before.

use std::ops::Range;

use crate::format::layout::Zone;
use crate::image::Image;

/// The data runs of one image, read once per check.
#[derive(Debug)]
pub(super) struct Present {
    runs: Option<Vec<(u64, u64)>>,
    /// Where the runs stop being known: the data zone's start.
    covered_end: u64,
}

impl Present {
    /// The data runs of the image's metadata zones (everything before the data zone) as its
    /// file holds them now: a repair's stores count at the next call.
    pub(super) fn of(image: &Image) -> Present {
        let metadata_end = image.geometry().span(Zone::Data).offset;
        Present {
            runs: image.region().data_runs(0, metadata_end),
            covered_end: metadata_end,
        }
    }

    /// The runs, when they cover `[offset, end)`.
    fn runs_over(&self, offset: u64, end: u64) -> Option<&[(u64, u64)]> {
        debug_assert!(offset <= end);
        self.runs.as_deref().filter(|_| end <= self.covered_end)
    }

    /// The indexes, ascending, of the records of `zone` that lie wholly on data pages: all of
    /// them when the runs are unknown. A record written once lies wholly on data pages (the
    /// write made every page it touches data), so one that reaches into a hole was never
    /// written and reads as zeros, a free record; reading it would fault the hole's page in.
    pub(super) fn records(&self, image: &Image, zone: Zone) -> impl Iterator<Item = u64> {
        self.ranges(image, zone, Cover::Whole).into_iter().flatten()
    }

    /// The indexes, ascending, of the records of `zone` that share a byte with a data page: for
    /// the logs, which are written an entry at a time, so a log in use may end in a hole.
    pub(super) fn touched_records(&self, image: &Image, zone: Zone) -> impl Iterator<Item = u64> {
        self.ranges(image, zone, Cover::Any).into_iter().flatten()
    }

    fn ranges(&self, image: &Image, zone: Zone, cover: Cover) -> Vec<Range<u64>> {
        let span = image.geometry().span(zone);
        let size = zone.record_bytes();
        let runs = self.runs_over(span.offset, span.offset + size * span.count);
        record_ranges(runs, span.offset, size, span.count, cover)
    }

    /// The block bitmap, reading only its bytes on data pages (the rest are clear bits).
    pub(super) fn bitmap(&self, image: &Image) -> Vec<u8> {
        let span = image.geometry().span(Zone::Bitmap);
        let mut bytes = vec![0u8; span.count as usize];
        let runs = self.runs_over(span.offset, span.offset + span.count);
        for r in record_ranges(runs, span.offset, 1, span.count, Cover::Whole) {
            let (from, to) = (r.start as usize, r.end as usize);
            image
                .region()
                .read_bytes(span.offset + r.start, &mut bytes[from..to]);
        }
        bytes
    }
}

/// Which records [`record_ranges`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cover {
    /// Those wholly inside a run.
    Whole,
    /// Those sharing a byte with a run.
    Any,
}

/// Index ranges, ascending and disjoint, of the records `i < count` at `base + i * size` inside
/// `runs` (sorted, disjoint `(offset, len)`) as `cover` says; `0..count` when `runs` is `None`.
fn record_ranges(
    runs: Option<&[(u64, u64)]>,
    base: u64,
    size: u64,
    count: u64,
    cover: Cover,
) -> Vec<Range<u64>> {
    let Some(runs) = runs else {
        return std::iter::once(0..count).collect();
    };
    let end = base + size * count;
    let mut out: Vec<Range<u64>> = Vec::new();
    for &(at, len) in runs {
        let (from, to) = (at.max(base), (at + len).min(end));
        if from >= to {
            continue;
        }
        let (first, last) = match cover {
            Cover::Whole => ((from - base).div_ceil(size), (to - base) / size),
            Cover::Any => ((from - base) / size, (to - base).div_ceil(size)),
        };
        if first >= last {
            continue;
        }
        match out.last_mut() {
            Some(r) if r.end >= first => r.end = r.end.max(last),
            _ => out.push(first..last),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_on_data_pages_and_those_straddling_them() {
        use Cover::{Any, Whole};
        // Records of 40 bytes from offset 1000; data on [4096, 8192) and [12288, 12289).
        let runs = [(4096, 4096), (12288, 1)];
        // Touching: from (4096 - 1000) / 40 = 77 to the one holding 8191, 179; and 282, which
        // holds 12288. Wholly inside: 78 ([4120, 4160)) to 178 ([8120, 8160)); none at 12288.
        assert_eq!(
            record_ranges(Some(&runs), 1000, 40, 1000, Any),
            vec![77..180, 282..283]
        );
        assert_eq!(
            record_ranges(Some(&runs), 1000, 40, 1000, Whole),
            vec![78..179]
        );
        let all: Vec<u64> = record_ranges(None, 1000, 40, 7, Whole)
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(all, (0..7).collect::<Vec<u64>>());
        assert_eq!(
            record_ranges(Some(&[]), 0, 8, 100, Any),
            Vec::<Range<u64>>::new()
        );
        // Runs before and past the table, and one record shared by two runs.
        let runs = [(0, 10), (96, 4), (104, 4), (10_000, 50)];
        assert_eq!(record_ranges(Some(&runs), 100, 8, 10, Any), vec![0..1]);
        assert_eq!(
            record_ranges(Some(&runs), 100, 8, 10, Whole),
            Vec::<Range<u64>>::new()
        );
        let runs = [(100, 4), (104, 4)];
        assert_eq!(record_ranges(Some(&runs), 100, 8, 10, Any), vec![0..1]);
        // Page-aligned records (pinodes, buckets) on whole pages are kept either way.
        let runs = [(8192, 8192)];
        assert_eq!(
            record_ranges(Some(&runs), 4096, 128, 1000, Whole),
            vec![32..96]
        );
        assert_eq!(
            record_ranges(Some(&runs), 4096, 128, 1000, Any),
            vec![32..96]
        );
    }
}
