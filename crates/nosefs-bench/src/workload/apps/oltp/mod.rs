//! `oltp`: seed 000's OLTP workload, run by the databases themselves.
//!
//! - PostgreSQL 15 (`postgres.rs`): pgbench's TPC-B-like transactions, and the TPC-C-like mix
//!   of `tpcc/` as pgbench scripts; two clients.
//! - MariaDB (`mariadb.rs`): sysbench's `oltp_read_write`, two clients (seed 000 ran MySQL).
//! - SQLite (`sqlite`, below): the same TPC-C-like mix, one client, through Debian's python3:
//!   the configuration the published user-space PM file systems report (SplitFS, MadFS).
//!
//! The TPC-C-like mix: TPC-C's nine tables and five transactions in its proportions (45%
//! new-order, 43% payment, 4% each order-status, delivery and stock-level), every customer and
//! item drawn uniformly, no think time, scaled down: 4 warehouses of 10 districts, 300
//! customers per district (TPC-C: 3,000) and 10,000 items (100,000), so that a run loads in a
//! second. Every database's run ends with a restart and checks of what it committed; a server
//! of many processes does not run in embedded mode, whose place gets the SQLite part alone.

mod mariadb;
mod postgres;

use std::io;

use super::{measured, path_arg, run_driver, Measured, Place};

/// The TPC-C-like mix's files: the schema, PostgreSQL's population, the checks and the five
/// transactions as pgbench scripts, and the SQLite driver.
const TPCC_FILES: [(&str, &str); 8] = [
    ("schema.sql", include_str!("tpcc/schema.sql")),
    ("load-pg.sql", include_str!("tpcc/load-pg.sql")),
    ("check.sql", include_str!("tpcc/check.sql")),
    ("new_order.sql", include_str!("tpcc/new_order.sql")),
    ("payment.sql", include_str!("tpcc/payment.sql")),
    ("order_status.sql", include_str!("tpcc/order_status.sql")),
    ("delivery.sql", include_str!("tpcc/delivery.sql")),
    ("stock_level.sql", include_str!("tpcc/stock_level.sql")),
];

/// The transactions and their weights (TPC-C 5.2.3's minimum shares, new-order the rest); the
/// first must stay new-order and the second payment (`Tpcc::check` counts by position).
const TPCC_MIX: [(&str, u32); 5] = [
    ("new_order", 45),
    ("payment", 43),
    ("order_status", 4),
    ("delivery", 4),
    ("stock_level", 4),
];

const SQLITE_TPCC: &str = include_str!("tpcc/sqlite.py");

/// The TPC-C-like database's size.
#[derive(Debug, Clone, Copy)]
struct Tpcc {
    warehouses: usize,
    customers_per_district: usize,
    items: usize,
}

impl Tpcc {
    const SCALED: Tpcc = Tpcc {
        warehouses: 4,
        customers_per_district: 300,
        items: 10_000,
    };

    /// The size as variables of psql (`-v`) or pgbench (`-D`).
    fn variables(&self, flag: &str) -> Vec<String> {
        [
            ("warehouses", self.warehouses),
            ("customers", self.customers_per_district),
            ("items", self.items),
        ]
        .into_iter()
        .flat_map(|(name, value)| [flag.to_string(), format!("{name}={value}")])
        .collect()
    }

    fn describe(&self) -> String {
        format!("{} warehouses", self.warehouses)
    }

    /// `counts`: check.sql's answers after a restart, one per line (orders, history rows,
    /// districts and orders offending consistency conditions 2 and 3).
    fn check(&self, who: &str, counts: &str, new_orders: usize, payments: usize) -> io::Result<()> {
        let loaded_orders = self.warehouses * 10 * self.customers_per_district;
        let want = format!("{}\n{payments}\n0\n0", loaded_orders + new_orders);
        if counts.trim() != want {
            return Err(io::Error::other(format!(
                "{who} lost or corrupted TPC-C data across a restart: orders, history, \
                 inconsistent districts and orders {:?}, want {want:?} \
                 ({new_orders} new orders and {payments} payments committed)",
                counts.trim()
            )));
        }
        Ok(())
    }
}

/// The `oltp` workload: every database the place can serve. A part the place or the machine
/// cannot run is named on stderr; the workload fails as unsupported only if no part ran.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    type Part = fn(&Place, usize) -> io::Result<Vec<Measured>>;
    let parts: [(&str, Part); 3] = [
        ("PostgreSQL", postgres::run),
        ("MariaDB", mariadb::run),
        ("SQLite TPC-C", sqlite),
    ];
    let mut all = Vec::new();
    let mut not_run = Vec::new();
    for (name, part) in parts {
        match part(place, ops) {
            Ok(measured) => all.extend(measured),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                eprintln!("oltp: {name} not run here: {e}");
                not_run.push(format!("{name}: {e}"));
            }
            Err(e) => return Err(io::Error::other(format!("{name}: {e}"))),
        }
    }
    if all.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            not_run.join("; "),
        ));
    }
    Ok(all)
}

/// The TPC-C-like mix on SQLite, one client.
fn sqlite(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    let tpcc = Tpcc::SCALED;
    let db = place.dir.join("tpcc.db");
    let report = run_driver(
        place,
        SQLITE_TPCC,
        &[
            path_arg(&db)?,
            &ops.to_string(),
            &tpcc.warehouses.to_string(),
            &tpcc.customers_per_district.to_string(),
            &tpcc.items.to_string(),
            TPCC_FILES[0].1,
            TPCC_FILES[2].1,
        ],
    );
    for suffix in ["", "-journal"] {
        let file = format!("{}{suffix}", db.display());
        place.run("rm", &["-f".as_ref(), file.as_ref()])?;
    }
    let report = report?;
    let integrity = report["integrity"].as_str().unwrap_or("");
    if integrity != "ok" {
        return Err(io::Error::other(format!(
            "SQLite's TPC-C database fails integrity_check: {integrity:?}"
        )));
    }
    let count = |field: &str| report[field].as_u64().unwrap_or(u64::MAX) as usize;
    tpcc.check(
        "SQLite",
        report["counts"].as_str().unwrap_or(""),
        count("new_orders"),
        count("payments"),
    )?;
    let variant = format!("sqlite3 -c 1, {}", tpcc.describe());
    report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|phase| measured(phase, &variant, 0))
        .collect()
}
