//! The block bitmap against the blocks the extents hold.

use super::*;

pub(super) fn check_bitmap(
    image: &Image,
    computed: &[u8],
    pending: &Pending,
    present: &Present,
    report: &mut FsckReport,
) {
    let g = image.geometry();
    let on_media = present.bitmap(image);
    let mut wrong = Vec::new();
    for block in 0..g.bitmap_bytes() * 8 {
        if bitmap::is_set(&on_media, block) != bitmap::is_set(computed, block)
            && !pending.blocks.contains(&block)
        {
            wrong.push(block);
        }
    }
    if wrong.is_empty() {
        return;
    }
    let shown: Vec<String> = wrong.iter().take(8).map(u64::to_string).collect();
    let more = if wrong.len() > 8 {
        format!(" and {} more", wrong.len() - 8)
    } else {
        String::new()
    };
    let p = problem(
        "bitmap",
        "bits",
        format!(
            "{} blocks disagree with the extents (blocks {}{more})",
            wrong.len(),
            shown.join(", ")
        ),
    );
    report.problems.push(p);
}

/// The blocks covered by valid extents that lie inside the data zone.
pub(super) fn referenced_blocks(image: &Image, present: &Present) -> Vec<u8> {
    let g = image.geometry();
    let mut computed = vec![0u8; g.bitmap_bytes() as usize];
    for eno in present
        .records(image, Zone::ExtentTable)
        .filter(|&e| e != 0)
    {
        let e = image.extent(eno);
        if e.is_valid() {
            let start = u64::from(e.start_block.get());
            let end = (start + u64::from(e.block_count.get())).min(g.data_block_count());
            (start..end).for_each(|b| bitmap::set(&mut computed, b, true));
        }
    }
    computed
}

/// Rewrites the bitmap from the blocks the valid extents hold.
pub(super) fn repair_bitmap(image: &Image) {
    let computed = referenced_blocks(image, &Present::of(image));
    let span = image.geometry().span(Zone::Bitmap);
    image.region().write_bytes(span.offset, &computed);
    image.region().persist(span.offset, span.count);
}
