//! `decode`'s lines in poketrace's own layout.

use tracedecode::{Kind, Out};

use crate::print::columns::{put_cpu, put_seconds};
use crate::symbols::Symbolizer;
use crate::text::Text;

/// `name+0xoff` of the symbol covering `addr` at `time` (nothing when none
/// does), in a column of `width`.
fn put_symbol(t: &mut Text, symbols: &Symbolizer, addr: u64, time: u64, width: usize) {
    let from = t.mark();
    if let Some((name, off)) = symbols.lookup_at(addr, time) {
        t.str(name).byte(b'+').hex_0x(off);
    }
    t.left(from, width);
}

/// One line in poketrace's own layout.
pub fn write_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer) {
    if let Some((_, tid, comm)) = who {
        let from = t.mark();
        t.str(comm).right(from, 16).byte(b' ');
        let from = t.mark();
        t.int(i64::from(tid)).right(from, 6).byte(b' ');
    }
    put_cpu(t, cpu);
    t.byte(b' ');
    let from = t.mark();
    put_seconds(t, l.time);
    t.right(from, 20).str(":   ");
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
