//! What `nosefs info` reports: the zones and how much of each is in use.

use crate::format::bitmap;
use crate::format::layout::{Zone, ZoneSpan};
use crate::format::marks::Table;
use crate::format::pinode::{self, FLAG_LONG_NAME};
use crate::format::BLOCK_SIZE;
use crate::image::Image;

/// Usage of an image, from one scan of its tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Valid pinodes (names), including the root.
    pub pinodes_used: u64,
    /// Valid pinodes that are primary (distinct files and directories).
    pub inodes_used: u64,
    /// Directories.
    pub directories: u64,
    /// Long-name records in use.
    pub long_names_used: u64,
    /// Valid extents.
    pub extents_used: u64,
    /// Data blocks set in the bitmap.
    pub blocks_used: u64,
    /// Bytes of file data the valid extents hold.
    pub live_bytes: u64,
    /// Directory logs holding committed entries.
    pub dir_logs_pending: u64,
    /// File logs in use.
    pub file_logs_pending: u64,
    /// The high-water marks (pinodes, long names, extents), when the image keeps them: the scan
    /// reads each table only below its mark.
    pub marks: Option<[u64; 3]>,
}

impl Usage {
    /// Scans the image's tables, below their high-water marks when it keeps them.
    pub fn scan(image: &Image) -> Usage {
        let g = image.geometry();
        let mut usage = Usage::default();
        // A mark is not trusted past its table (fsck reports a bad one).
        let high = |t: Table| image.mark(t).min(image.table_count(t));
        if g.high_water_marks {
            usage.marks = Some(Table::ALL.map(high));
        }
        for slot in 1..high(Table::Pinodes) {
            let p = image.pinode(slot);
            if !p.is_valid() {
                continue;
            }
            usage.pinodes_used += 1;
            usage.inodes_used += u64::from(p.is_primary());
            usage.directories +=
                u64::from(p.is_primary() && p.mode.get() & pinode::S_IFMT == pinode::S_IFDIR);
            usage.long_names_used += u64::from(p.flags.get() & FLAG_LONG_NAME != 0);
        }
        for eno in 1..high(Table::Extents) {
            let e = image.extent(eno);
            if e.is_valid() {
                usage.extents_used += 1;
                usage.live_bytes += u64::from(e.length.get());
            }
        }
        usage.blocks_used = bitmap::count_set(&image.bitmap(), g.data_block_count());
        usage.dir_logs_pending = (1..g.dir_log_count())
            .filter(|&i| image.dir_log(i).tail.get() != 0)
            .count() as u64;
        usage.file_logs_pending = (1..g.file_log_count())
            .filter(|&i| image.file_log(i).tail.get() != 0)
            .count() as u64;
        usage
    }

    /// Allocated data bytes per live byte of file data (1.0 is perfect; `None` with no data).
    pub fn space_amplification(&self) -> Option<f64> {
        (self.live_bytes > 0)
            .then(|| (self.blocks_used * BLOCK_SIZE) as f64 / self.live_bytes as f64)
    }
}

/// One row of the zone table: name, span, bytes, and records in use where known.
#[derive(Debug, Clone)]
pub struct ZoneRow {
    /// The zone.
    pub zone: Zone,
    /// Where it lies.
    pub span: ZoneSpan,
    /// Bytes it occupies.
    pub bytes: u64,
    /// Records in use (slot 0 excluded), where that is meaningful.
    pub used: Option<u64>,
}

/// The zone table of an image with its usage.
pub fn zone_rows(image: &Image, usage: &Usage) -> Vec<ZoneRow> {
    let g = image.geometry();
    Zone::ALL
        .iter()
        .map(|&zone| {
            let span = g.span(zone);
            let used = match zone {
                Zone::DirJournal => Some(usage.dir_logs_pending),
                Zone::FileJournal => Some(usage.file_logs_pending),
                Zone::HashTable | Zone::Bitmap => None,
                Zone::PinodeTable => Some(usage.pinodes_used),
                Zone::LongNames => Some(usage.long_names_used),
                Zone::ExtentTable => Some(usage.extents_used),
                Zone::Data => Some(usage.blocks_used),
            };
            ZoneRow {
                zone,
                span,
                bytes: span.bytes(zone),
                used,
            }
        })
        .collect()
}
