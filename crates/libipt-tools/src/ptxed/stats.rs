//! `--stat`: the instructions and blocks decoded, printed after the trace
//! (also with `--quiet`) in ptxed's layout.

use std::io::{self, Write};

use super::options::StatFlags;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub insn: u64,
    /// Blocks of the block decoder.
    pub blocks: u64,
}

impl Stats {
    pub fn print(&self, flags: StatFlags, out: &mut impl Write) -> io::Result<()> {
        if flags.insn {
            writeln!(out, "insn: {}.", self.insn)?;
        }
        if flags.blocks {
            writeln!(out, "blocks:\t{}.", self.blocks)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_the_statistics_asked_for() {
        let mut out = Vec::new();
        Stats { insn: 4, blocks: 1 }.print(StatFlags { insn: true, blocks: true }, &mut out).unwrap();
        assert_eq!(out, b"insn: 4.\nblocks:\t1.\n");
        out.clear();
        Stats { insn: 4, blocks: 1 }.print(StatFlags { insn: false, blocks: true }, &mut out).unwrap();
        assert_eq!(out, b"blocks:\t1.\n");
    }
}
