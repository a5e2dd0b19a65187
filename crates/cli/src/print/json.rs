//! `decode`'s lines as JSON objects, one a line.

use tracedecode::{Kind, Out};

use crate::symbols::Symbolizer;
use crate::text::Text;

/// One line as a JSON object, its keys in sorted order (as `serde_json`
/// writes a map): `addr`, `addr_sym`, `code`, `comm`, `cpu`, `error`,
/// `flags`, `insn`, `ip`, `offset`, `pid`, `sym`, `tid`, `time`, `uncertain`,
/// those the line has.
pub fn write_json_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer) {
    let cpu = i64::from(cpu as i32);
    let sym = |t: &mut Text, addr: u64| {
        t.byte(b'"');
        if let Some((name, off)) = symbols.lookup_at(addr, l.time) {
            t.json_chars(name).byte(b'+').hex_0x(off);
        }
        t.byte(b'"');
    };
    let (pid, tid, comm) = match who {
        Some((pid, tid, comm)) => (Some(pid), Some(tid), Some(comm)),
        None => (None, None, None),
    };
    let task = |t: &mut Text, from_pid: bool| {
        if from_pid {
            if let Some(pid) = pid {
                t.str(",\"pid\":").int(pid.into());
            }
        } else if let Some(tid) = tid {
            t.str(",\"tid\":").int(tid.into());
        }
    };
    let put_comm = |t: &mut Text| {
        if let Some(c) = comm {
            t.str(",\"comm\":\"").json_chars(c).byte(b'"');
        }
    };
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str("{\"addr\":").dec(*to).str(",\"addr_sym\":");
            sym(t, *to);
            put_comm(t);
            t.str(",\"cpu\":").int(cpu).str(",\"flags\":[");
            for (i, f) in flags.split(' ').filter(|f| !f.is_empty()).enumerate() {
                if i > 0 {
                    t.byte(b',');
                }
                t.byte(b'"').json_chars(f).byte(b'"');
            }
            t.str("],\"ip\":").dec(*from);
            task(t, true);
            t.str(",\"sym\":");
            sym(t, *from);
        }
        Kind::Insn { ip, bytes, .. } => {
            t.byte(b'{');
            if let Some(c) = comm {
                t.str("\"comm\":\"").json_chars(c).str("\",");
            }
            t.str("\"cpu\":").int(cpu).str(",\"insn\":\"");
            for &b in bytes.as_slice() {
                t.hex_byte(b);
            }
            t.str("\",\"ip\":").dec(*ip);
            task(t, true);
            t.str(",\"sym\":");
            sym(t, *ip);
        }
        Kind::Error { offset, ip, code, reason } => {
            t.str("{\"code\":").dec(u64::from(*code));
            put_comm(t);
            t.str(",\"cpu\":").int(cpu).str(",\"error\":\"").json_chars(reason).str("\",\"ip\":");
            match ip {
                Some(ip) => t.dec(*ip),
                None => t.str("null"),
            };
            t.str(",\"offset\":").dec(*offset as u64);
            task(t, true);
        }
    }
    task(t, false);
    t.str(",\"time\":").dec(l.time);
    if let Kind::Insn { uncertain, .. } = &l.kind {
        t.str(",\"uncertain\":").str(if *uncertain { "true" } else { "false" });
    }
    t.str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use isa::BranchClass;

    /// JSON lines hold what `serde_json` writes for the same values (its
    /// maps sorted by key), with and without the task, for each kind of line.
    #[test]
    fn json_lines_are_what_serde_json_writes() {
        use serde_json::json;
        let symbols = Symbolizer::default();
        let line = |time, kind| Out { time, queue: 0, cpu: 3, kind };
        let nop3 = tracedecode::InsnBytes::new(&[0x0f, 0x1f, 0x00], 3);
        let lines = [
            line(
                1_000_000_123,
                Kind::Branch { from: u64::MAX, to: 0x1234, flags: "tr end  call", from_len: Some(5), from_bytes: Default::default(), insns: 0 },
            ),
            line(7, Kind::Insn { ip: 0xffff_ffff_8100_0000, len: 3, class: BranchClass::None, to: None, uncertain: true, ends: false, bytes: nop3 }),
            line(0, Kind::Error { offset: 99, ip: None, code: 6, reason: "no \"TIP\"\there".into() }),
            line(u64::MAX, Kind::Error { offset: 0, ip: Some(1), code: 3, reason: String::new() }),
        ];
        for l in &lines {
            for who in [None, Some((-1, 42, "perf\\exec\u{1}")), Some((7, 8, "naïve"))] {
                let mut v = match &l.kind {
                    Kind::Branch { from, to, flags, .. } => json!({
                        "time": l.time, "cpu": 3, "ip": from, "addr": to, "sym": "", "addr_sym": "",
                        "flags": flags.split(' ').filter(|f| !f.is_empty()).collect::<Vec<_>>(),
                    }),
                    Kind::Insn { ip, uncertain, .. } => {
                        json!({"time": l.time, "cpu": 3, "ip": ip, "sym": "", "insn": "0f1f00", "uncertain": uncertain})
                    }
                    Kind::Error { offset, ip, code, reason } => {
                        json!({"time": l.time, "cpu": 3, "ip": ip, "offset": offset, "error": reason, "code": code})
                    }
                };
                if let (Some((pid, tid, comm)), Some(m)) = (who, v.as_object_mut()) {
                    m.insert("pid".into(), json!(pid));
                    m.insert("tid".into(), json!(tid));
                    m.insert("comm".into(), json!(comm));
                }
                let mut t = Text::default();
                write_json_line(&mut t, l, 3, who, &symbols);
                assert_eq!(std::str::from_utf8(t.as_bytes()).unwrap(), format!("{v}\n"));
            }
        }
    }
}
