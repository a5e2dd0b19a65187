//! Per CPU, over time: what the decode of the trace gave (instructions,
//! branches, errors, overflows, uncertain instructions), from the lines of
//! the tracedecode pipeline.

use std::collections::BTreeMap;
use std::ops::AddAssign;

use tracedecode::{Kind, Out};

use super::axis::Axis;

/// What one bin of one CPU holds.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct Cell {
    pub insns: u64,
    pub branches: u64,
    pub errors: u64,
    pub overflows: u64,
    pub uncertain: u64,
    /// Losses (LOST records, damaged AUX data) that touch the bin.
    pub lost: u64,
}

impl AddAssign for Cell {
    fn add_assign(&mut self, o: Cell) {
        self.insns += o.insns;
        self.branches += o.branches;
        self.errors += o.errors;
        self.overflows += o.overflows;
        self.uncertain += o.uncertain;
        self.lost += o.lost;
    }
}

/// The coverage of every CPU: a row of the axis each, and totals.
pub struct Coverage {
    pub axis: Axis<Cell>,
    /// CPU (or `u32::MAX` for per-thread buffers) -> row.
    pub rows: BTreeMap<u32, usize>,
    pub totals: BTreeMap<u32, Cell>,
}

impl Coverage {
    pub fn new(start: u64) -> Coverage {
        Coverage { axis: Axis::new(start), rows: BTreeMap::new(), totals: BTreeMap::new() }
    }

    fn row(&mut self, cpu: u32) -> usize {
        let next = self.rows.len();
        *self.rows.entry(cpu).or_insert(next)
    }

    /// Takes one decoded line.
    pub fn line(&mut self, l: &Out) {
        let row = self.row(l.cpu);
        let mut c = Cell::default();
        match l.kind {
            // Trace starts and ends are no branch executed.
            Kind::Branch { flags, .. } if flags.starts_with("tr ") => return,
            Kind::Branch { .. } => c.branches = 1,
            Kind::Insn { uncertain, .. } => {
                c.insns = 1;
                c.uncertain = uncertain as u64;
            }
            Kind::Error { code, .. } => {
                c.errors = 1;
                c.overflows = (code == 7) as u64;
            }
        }
        *self.totals.entry(l.cpu).or_default() += c.clone();
        *self.axis.at(row, l.time) += c;
    }

    /// A loss on `cpu` (None: no CPU known, shown on every row) from `from` to `at`.
    pub fn loss(&mut self, cpu: Option<u32>, from: u64, at: u64) {
        let rows: Vec<usize> = match cpu {
            Some(c) => vec![self.row(c)],
            None => self.rows.values().copied().collect(),
        };
        let (a, b) = (self.axis.bin(from), self.axis.bin(at));
        for row in rows {
            self.axis.at(row, at);
            for bin in a..=b {
                self.axis.rows[row][bin].lost += 1;
            }
        }
    }
}
