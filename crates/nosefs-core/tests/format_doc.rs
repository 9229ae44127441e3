//! docs/format.md is the authoritative format: its record tables must match the code exactly.

use std::collections::HashMap;

use nosefs_core::format::{RecordLayout, ALL_LAYOUTS};

/// One documented field: (name, offset, size).
type Row = (String, usize, usize);

/// `### Name (N bytes)` sections and the (field, offset, size) rows of the table after each.
fn doc_tables(doc: &str) -> HashMap<String, (usize, Vec<Row>)> {
    let mut tables = HashMap::new();
    let mut current: Option<(String, usize, Vec<Row>)> = None;
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            if let Some((name, size, rows)) = current.take() {
                tables.insert(name, (size, rows));
            }
            // Only `### Name (N bytes)` headings open a record table; any other heading ends one.
            let record = heading
                .split_once(" (")
                .and_then(|(name, rest)| Some((name, rest.strip_suffix(" bytes)")?.parse().ok()?)));
            current = record.map(|(name, size)| (name.to_string(), size, Vec::new()));
            continue;
        }
        let Some((_, _, rows)) = current.as_mut() else {
            continue;
        };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 {
            continue;
        }
        let (Ok(offset), Ok(size)) = (cells[1].parse::<usize>(), cells[2].parse::<usize>()) else {
            continue; // the header and separator rows
        };
        rows.push((cells[3].trim_matches('`').to_string(), offset, size));
    }
    if let Some((name, size, rows)) = current {
        tables.insert(name, (size, rows));
    }
    tables
}

fn code_rows(layout: &RecordLayout) -> Vec<Row> {
    layout
        .rows()
        .into_iter()
        .map(|(f, o, s)| (f.to_string(), o, s))
        .collect()
}

#[test]
fn every_record_table_in_format_md_matches_the_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/format.md"))
        .expect("docs/format.md exists");
    let tables = doc_tables(&doc);
    for layout in ALL_LAYOUTS {
        let (size, rows) = tables
            .get(layout.name)
            .unwrap_or_else(|| panic!("docs/format.md has no `### {} (...)` table", layout.name));
        assert_eq!(*size, layout.size, "{}: documented size", layout.name);
        assert_eq!(
            rows,
            &code_rows(layout),
            "{}: documented fields",
            layout.name
        );
    }
    let names: Vec<&str> = ALL_LAYOUTS.iter().map(|l| l.name).collect();
    for documented in tables.keys() {
        assert!(
            names.contains(&documented.as_str()),
            "docs/format.md documents `{documented}`, which the code does not have"
        );
    }
}

#[test]
fn layouts_have_no_gaps_and_fit_their_size() {
    for layout in ALL_LAYOUTS {
        let mut next = 0;
        for (field, offset, size) in layout.rows() {
            assert_eq!(offset, next, "{}.{field} leaves a gap", layout.name);
            assert!(size > 0, "{}.{field} is empty", layout.name);
            next = offset + size;
        }
        assert_eq!(next, layout.size, "{} fields cover the record", layout.name);
    }
}
