//! `decode`'s lines in `perf script`'s layout (`-F` fields).

use anyhow::{bail, Result};
use tracedecode::flags::{branch_flags, end_flags};
use tracedecode::{Kind, Out};

use crate::print::columns::{put_cpu, put_seconds};
use crate::symbols::Symbolizer;
use crate::text::Text;

/// perf script's `-F` fields that `decode` prints, always in perf's own
/// order (comm, pid/tid, cpu, time, flags, ip, sym, dso, addr, insn), with
/// perf's column layout, so the output diffs against `perf script -F`.
#[derive(Clone, Copy, Default)]
pub struct Fields {
    comm: bool,
    pid: bool,
    tid: bool,
    cpu: bool,
    time: bool,
    flags: bool,
    ip: bool,
    sym: bool,
    symoff: bool,
    dso: bool,
    addr: bool,
    insn: bool,
    insnlen: bool,
    /// Nanosecond times (`--ns`); perf's default is microseconds.
    ns: bool,
}

impl Fields {
    /// Whether lines show their instruction's bytes (`insn`).
    pub fn insn(&self) -> bool {
        self.insn
    }

    pub fn parse(s: &str, ns: bool) -> Result<Fields> {
        let mut f = Fields { ns, ..Fields::default() };
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let field = match name {
                "comm" => &mut f.comm,
                "pid" => &mut f.pid,
                "tid" => &mut f.tid,
                "cpu" => &mut f.cpu,
                "time" => &mut f.time,
                "flags" => &mut f.flags,
                "ip" => &mut f.ip,
                "sym" => &mut f.sym,
                "symoff" => &mut f.symoff,
                "dso" => &mut f.dso,
                "addr" => &mut f.addr,
                "insn" => &mut f.insn,
                "insnlen" => &mut f.insnlen,
                _ => bail!("-F {name}: not a field poketrace prints (comm, pid, tid, cpu, time, flags, ip, sym, symoff, dso, addr, insn, insnlen)"),
            };
            *field = true;
        }
        Ok(f)
    }
}

/// perf's message for its decode error code (its intel-pt decoder's numbering).
fn perf_error_message(code: u32) -> &'static str {
    match code {
        3 => "Bad packet",
        4 => "No more data",
        5 => "Failed to get instruction",
        6 => "Trace doesn't match instruction",
        7 => "Overflow packet",
        8 => "Lost trace data",
        10 => "Never-ending loop",
        _ => "Unknown error!",
    }
}

/// One line in `perf script -F`'s layout (the fields in perf's order and widths).
pub fn write_perf_line(t: &mut Text, f: &Fields, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer) {
    let (pid, tid, comm) = who.unwrap_or((-1, -1, ":-1"));
    if let Kind::Error { ip, code, .. } = &l.kind {
        t.str(" instruction trace error type 1 time ");
        put_seconds(t, l.time);
        t.str(" cpu ").int(i64::from(cpu as i32)).str(" pid ").int(pid.into()).str(" tid ").int(tid.into());
        t.str(" ip ").hex_0x(ip.unwrap_or(0)).str(" code ").dec(u64::from(*code)).str(": ").str(perf_error_message(*code)).byte(b'\n');
        return;
    }
    if f.comm {
        t.str_right(comm, 16).byte(b' ');
    }
    let number = |t: &mut Text, v: i32, width: usize, right: bool| {
        if right {
            t.int_right(v.into(), width);
        } else {
            let from = t.mark();
            t.int(v.into()).left(from, width);
        }
    };
    match (f.pid, f.tid) {
        (true, true) => {
            number(t, pid, 5, true);
            t.byte(b'/');
            number(t, tid, 5, false);
            t.byte(b' ');
        }
        (true, false) => {
            number(t, pid, 5, true);
            t.byte(b' ');
        }
        (false, true) => {
            number(t, tid, 5, true);
            t.byte(b' ');
        }
        (false, false) => {}
    }
    if f.cpu {
        put_cpu(t, cpu);
        t.byte(b' ');
    }
    if f.time {
        t.int_right((l.time / 1_000_000_000) as i64, 5).byte(b'.');
        match f.ns {
            true => t.zeros(l.time % 1_000_000_000, 9),
            false => t.zeros(l.time % 1_000_000_000 / 1000, 6),
        };
        t.str(": ");
    }
    let sym = |t: &mut Text, addr: u64| {
        if f.sym {
            match symbols.lookup_at(addr, l.time) {
                Some((name, off)) if f.symoff => t.byte(b' ').str(name).byte(b'+').hex_0x(off),
                Some((name, _)) => t.byte(b' ').str(name),
                None => t.str(" [unknown]"),
            };
        }
        if f.dso {
            t.str(" (").str(if addr == 0 { "[unknown]" } else { symbols.dso(addr) }).byte(b')');
        }
    };
    let (ip, len, bytes, flags, addr, branch) = match &l.kind {
        Kind::Branch { from, to, flags, from_len, from_bytes, .. } => (*from, *from_len, from_bytes, *flags, *to, true),
        Kind::Insn { ip, len, class, to, ends: true, bytes, .. } => (*ip, Some(*len), bytes, end_flags(*class), to.unwrap_or(0), false),
        Kind::Insn { ip, len, class, to, bytes, .. } => (*ip, Some(*len), bytes, branch_flags(*class, bytes.as_slice()), to.unwrap_or(0), false),
        Kind::Error { .. } => unreachable!("written above"),
    };
    if f.flags {
        t.str("  ").str_left(flags, 21).byte(b' ');
    }
    // perf prints an instruction sample's addr before its ip, a branch's after.
    if f.addr && !branch {
        t.hex_right(addr, 16);
    }
    if f.ip {
        t.byte(b' ').hex_right(ip, 16);
        sym(t, ip);
    }
    if f.addr && branch {
        t.str(" => ").hex_right(addr, 16);
        sym(t, addr);
    }
    if f.insnlen || f.insn {
        // A branch sample's instruction is the branch itself (an event's:
        // the instruction it stopped), as it was decoded.
        let (len, bytes) = (len.map_or(0, usize::from), bytes.as_slice());
        if f.insnlen {
            t.str(" ilen: ").dec(len as u64);
        }
        if f.insn && !bytes.is_empty() {
            t.str(" insn:");
            for &b in bytes.iter() {
                t.byte(b' ').hex_byte(b);
            }
        }
    }
    t.byte(b'\n');
}
