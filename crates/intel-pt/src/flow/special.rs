//! Instructions the trace treats apart: a MOV to CR3 (a TIP.PGD without
//! an IP may stop tracing there, and a PIP belongs to it), a PTWRITE (its
//! packet belongs to it), a VMLAUNCH or VMRESUME (SKD022), and a direct
//! branch out of the address filter (a TIP.PGD without an IP stops tracing
//! there). Their bytes are read again: rare, off the walk's path.

use isa::{BranchClass, Insn};

use super::state::State;
use super::walk::Walker;
use codeimage::window::{CodeSource, Fetch};

impl<'a, C: CodeSource> Walker<'a, C> {
    /// Whether the instruction at `ip` is a VMLAUNCH or VMRESUME (`0f 01 c2|c3`).
    #[cold]
    pub(super) fn is_vm_entry(&self, st: &State<'a>, ip: u64) -> bool {
        let (buf, n) = self.bytes_at(st, ip);
        n >= 3 && matches!(buf[..3], [0x0f, 0x01, 0xc2 | 0xc3])
    }

    /// Whether `insn` at `ip` is a MOV to CR3 (`[rex] 0f 22 /3`; other
    /// prefixes are not looked through).
    #[cold]
    pub(super) fn is_cr3_write(&self, st: &State<'a>, ip: u64, insn: &Insn) -> bool {
        if insn.class != BranchClass::None {
            return false;
        }
        let (buf, n) = self.bytes_at(st, ip);
        let at = usize::from(n > 0 && buf[0] & 0xf0 == 0x40);
        n >= at + 3 && buf[at..at + 2] == [0x0f, 0x22] && (buf[at + 2] >> 3) & 7 == 3
    }

    /// Whether the instruction at `ip` is a PTWRITE (`f3 [rex] 0f ae /4`).
    #[cold]
    pub(super) fn is_ptwrite(&self, st: &State<'a>, ip: u64) -> bool {
        let (buf, n) = self.bytes_at(st, ip);
        let at = 1 + usize::from(n > 1 && buf[1] & 0xf0 == 0x40);
        n >= at + 3 && buf[0] == 0xf3 && buf[at..at + 2] == [0x0f, 0xae] && (buf[at + 2] >> 3) & 7 == 4
    }

    /// Whether `insn` is a direct branch out of the address filter's ranges.
    pub(super) fn leaves_filter(&self, insn: &Insn) -> bool {
        let direct = matches!(insn.class, BranchClass::DirectJump | BranchClass::DirectCall);
        direct && self.filter.zip(insn.target).is_some_and(|(f, to)| !f.traces(to))
    }

    /// The code at `ip` (the first candidate, when it changes), and how
    /// many of its bytes there are.
    fn bytes_at(&self, st: &State<'a>, ip: u64) -> ([u8; 16], usize) {
        let mut buf = [0u8; 16];
        let n = match self.code.fetch(ip, st.clock.lo, st.clock.hi, 0, &mut buf) {
            Fetch::Exact(n) | Fetch::Candidate { filled: n, .. } => n,
            Fetch::Unmapped => 0,
        };
        (buf, n)
    }
}
