//! `decode`'s lines in poketrace's own layout.

use tracedecode::{Kind, Out};

use crate::print::columns::{put_cpu, put_seconds};
use crate::symbols::Symbolizer;
use crate::text::{chars, decimal_digits, Text};

/// `name+0xoff` of the symbol covering `addr` at `time` (nothing when none
/// does), in a column of `width`; from `memo` when it has `addr`'s.
fn put_symbol(t: &mut Text, symbols: &Symbolizer, addr: u64, time: u64, width: usize, memo: &mut Memo) {
    let slot = &mut memo.symbols[symbol_slot(addr)];
    if slot.addr == Some(addr) {
        t.bytes_mut().extend_from_slice(&slot.bytes[..usize::from(slot.len)]);
        t.spaces(width.saturating_sub(usize::from(slot.chars)));
        return;
    }
    let from = t.mark();
    if let Some((name, off)) = symbols.lookup_at(addr, time) {
        t.str(name).byte(b'+').hex_0x(off);
    }
    let written = &t.as_bytes()[from..];
    if written.len() <= slot.bytes.len() && symbols.same_at_all_times(addr) {
        slot.bytes[..written.len()].copy_from_slice(written);
        (slot.addr, slot.len, slot.chars) = (Some(addr), written.len() as u8, chars(written) as u8);
    }
    t.left(from, width);
}

/// What the next line may copy from the last ones: the columns that say
/// who ran the last line and on which CPU (the same for runs of a queue's
/// lines), and the symbol columns of recent addresses.
pub struct Memo {
    who: Option<WhoKey>,
    who_bytes: Vec<u8>,
    symbols: Box<[Symbol; SYMBOLS]>,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo { who: None, who_bytes: Vec::new(), symbols: Box::new([Symbol { addr: None, len: 0, chars: 0, bytes: [0; 46] }; SYMBOLS]) }
    }
}

/// The thread id and the name's address and length (names come from one
/// table), and the CPU.
type WhoKey = (Option<(i32, usize, usize)>, u32);

/// Addresses whose symbol column [`Memo`] keeps, by a hash of the address.
const SYMBOLS: usize = 1024;

/// The symbol column of an address whose symbol is the same at all times.
#[derive(Clone, Copy)]
struct Symbol {
    addr: Option<u64>,
    len: u8,
    chars: u8,
    bytes: [u8; 46],
}

/// Where [`Memo::symbols`] keeps `addr`'s column.
fn symbol_slot(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SYMBOLS.trailing_zeros())) as usize
}

/// One line in poketrace's own layout; `memo` keeps its first columns for the next.
pub fn write_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, memo: &mut Memo) {
    let key = (who.map(|(_, tid, comm)| (tid, comm.as_ptr() as usize, comm.len())), cpu);
    if memo.who == Some(key) {
        t.bytes_mut().extend_from_slice(&memo.who_bytes);
    } else {
        let from = t.mark();
        if let Some((_, tid, comm)) = who {
            t.str_right(comm, 16).byte(b' ').int_right(i64::from(tid), 6).byte(b' ');
        }
        put_cpu(t, cpu);
        t.byte(b' ');
        memo.who_bytes.clear();
        memo.who_bytes.extend_from_slice(&t.as_bytes()[from..]);
        memo.who = Some(key);
    }
    // `seconds.nanoseconds` right in 20 columns.
    t.spaces(20usize.saturating_sub(decimal_digits(l.time / 1_000_000_000) + 10));
    put_seconds(t, l.time);
    t.str(":   ");
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str_left(flags, 8).byte(b' ').hex_right(*from, 16).byte(b' ');
            put_symbol(t, symbols, *from, l.time, 32, memo);
            t.str(" => ").hex_right(*to, 16).byte(b' ');
            put_symbol(t, symbols, *to, l.time, 0, memo);
        }
        Kind::Insn { ip, len, uncertain, .. } => {
            t.hex_right(*ip, 16).byte(b' ');
            put_symbol(t, symbols, *ip, l.time, 32, memo);
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

#[cfg(test)]
mod tests {
    use super::*;
    use perfdata::Ksymbol;

    /// Lines written with one memo are those written each with a new one:
    /// also for an address a KSYMBOL record names from a time on, and while
    /// who ran the lines changes.
    #[test]
    fn lines_from_the_memo_are_lines_written_afresh() {
        let mut symbols = Symbolizer::default();
        let (tramp, other) = (0xffff_ffff_a000_0000u64, 0xffff_ffff_8100_0000u64);
        symbols.apply_at(&Ksymbol { addr: tramp, len: 0x100, ksym_type: 1, flags: 0, name: b"tramp" }, 100);
        let line = |time, from, to| Out {
            time,
            queue: 0,
            cpu: (time % 3) as u32,
            kind: Kind::Branch { from, to, flags: "call", from_len: None, from_bytes: Default::default(), insns: 0 },
        };
        let mut memo = Memo::default();
        let mut named = 0;
        for (k, time) in [50, 150, 60, 200, 200, 70, 300].into_iter().enumerate() {
            let l = line(time, other + k as u64, tramp + 0x10);
            let who = [None, Some((1, 2, "a")), Some((1, 3, "b"))][k % 3];
            let (mut kept, mut afresh) = (Text::default(), Text::default());
            write_line(&mut kept, &l, l.cpu, who, &symbols, &mut memo);
            write_line(&mut afresh, &l, l.cpu, who, &symbols, &mut Memo::default());
            let text = String::from_utf8(kept.as_bytes().to_vec()).unwrap();
            assert_eq!(text, String::from_utf8(afresh.as_bytes().to_vec()).unwrap(), "line {k}");
            assert_eq!(text.trim_end().ends_with("tramp+0x10"), time >= 100, "{text}");
            named += usize::from(time >= 100);
        }
        assert_eq!(named, 4);
    }
}
