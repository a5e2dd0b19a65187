//! `decode`'s lines in poketrace's own layout.

use tracedecode::{Kind, Out};

use crate::print::columns::{put_cpu, put_seconds};
use crate::symbols::Symbolizer;
use crate::text::{decimal_digits, Text};

/// `name+0xoff` of the symbol covering `addr` at `time` (nothing when none
/// does), in a column of `width`.
fn put_symbol(t: &mut Text, symbols: &Symbolizer, addr: u64, time: u64, width: usize) {
    let from = t.mark();
    if let Some((name, off)) = symbols.lookup_at(addr, time) {
        t.str(name).byte(b'+').hex_0x(off);
    }
    t.left(from, width);
}

/// The columns of the last line that say who ran it and on which CPU,
/// kept to be copied while the next lines' are the same (runs of a
/// queue's lines).
#[derive(Default)]
pub struct Who {
    key: Option<WhoKey>,
    bytes: Vec<u8>,
}

/// The thread id and the name's address and length (names come from one
/// table), and the CPU.
type WhoKey = (Option<(i32, usize, usize)>, u32);

/// One line in poketrace's own layout; `memo` keeps its first columns for the next.
pub fn write_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, memo: &mut Who) {
    let key = (who.map(|(_, tid, comm)| (tid, comm.as_ptr() as usize, comm.len())), cpu);
    if memo.key == Some(key) {
        t.bytes_mut().extend_from_slice(&memo.bytes);
    } else {
        let from = t.mark();
        if let Some((_, tid, comm)) = who {
            t.str_right(comm, 16).byte(b' ').int_right(i64::from(tid), 6).byte(b' ');
        }
        put_cpu(t, cpu);
        t.byte(b' ');
        memo.bytes.clear();
        memo.bytes.extend_from_slice(&t.as_bytes()[from..]);
        memo.key = Some(key);
    }
    // `seconds.nanoseconds` right in 20 columns.
    t.spaces(20usize.saturating_sub(decimal_digits(l.time / 1_000_000_000) + 10));
    put_seconds(t, l.time);
    t.str(":   ");
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str_left(flags, 8).byte(b' ').hex_right(*from, 16).byte(b' ');
            put_symbol(t, symbols, *from, l.time, 32);
            t.str(" => ").hex_right(*to, 16).byte(b' ');
            put_symbol(t, symbols, *to, l.time, 0);
        }
        Kind::Insn { ip, len, uncertain, .. } => {
            t.hex_right(*ip, 16).byte(b' ');
            put_symbol(t, symbols, *ip, l.time, 32);
            t.str(" len ").dec(u64::from(*len));
            if *uncertain {
                t.str("  (uncertain: several code versions fit)");
            }
        }
        Kind::Error { offset, ip, reason, .. } => {
            t.str("instruction trace error at offset ").hex_0x(*offset as u64);
            if let Some(ip) = ip {
                t.str(" ip ").hex_0x(*ip);
            }
            t.str(": ").str(reason);
        }
    }
    t.byte(b'\n');
}
