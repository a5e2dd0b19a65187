//! The state packets of the trace as ptxed shows them: `[exec mode: 64-bit]`,
//! `[begin transaction]`, `[paging, cr3: ...]`, power and PTWRITE events,
//! and the state they leave (the execution mode, IF, whether instructions
//! run inside a transaction and are shown with `? `).

use intel_pt::Packet;

/// What the state packets so far say.
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    /// The execution mode's bits (16, 32, 64), once a MODE.Exec said.
    mode: Option<u8>,
    /// RFLAGS.IF, once a MODE.Exec said.
    interrupts: Option<bool>,
    /// Inside a transaction: instructions run speculatively.
    pub speculative: bool,
    /// Event data (EVD) for the next control flow event: CR2, VMX exit
    /// qualification, VMX exit reason.
    cr2: Option<u64>,
    vmxq: Option<u64>,
    vmxr: Option<u64>,
}

/// How to show a state packet.
#[derive(Clone, Copy, Debug)]
pub struct Show {
    /// `, ip: IP` where the event has one (`--event:ip`).
    pub ip: bool,
    /// `interrupts enabled|disabled` when IF changes (`--event:iflags`).
    pub iflags: bool,
}

impl Status {
    /// An overflow: the mode is not known until the next MODE.Exec, and
    /// the processor is not in a transaction.
    pub fn overflow(&mut self) {
        self.mode = None;
        self.speculative = false;
    }

    /// Takes `packet` (at `ip`, when the trace binds it to one) and gives
    /// the event lines it makes, without brackets. `restated`: a PSB+
    /// repeats the state (no event, as libipt's status updates).
    pub fn take(&mut self, packet: &Packet, ip: Option<u64>, restated: bool, show: Show, lines: &mut Vec<String>) {
        let at = match ip.filter(|_| show.ip) {
            Some(ip) => format!(", ip: {ip:016x}"),
            None => String::new(),
        };
        match *packet {
            Packet::ModeExec { csl, csd, if_flag } => {
                let bits = if csl {
                    64
                } else if csd {
                    32
                } else {
                    16
                };
                let (old_mode, old_if) = (self.mode.replace(bits), self.interrupts.replace(if_flag));
                if restated {
                    return;
                }
                if old_mode != Some(bits) {
                    lines.push(format!("exec mode: {bits}-bit{at}"));
                }
                if show.iflags && old_if != Some(if_flag) {
                    lines.push(format!("interrupts {}{at}", if if_flag { "enabled" } else { "disabled" }));
                }
            }
            Packet::ModeTsx { intx, abort } => {
                self.speculative = intx && !abort;
                if restated {
                    return;
                }
                let what = if abort {
                    "aborted"
                } else if intx {
                    "begin transaction"
                } else {
                    "committed"
                };
                lines.push(format!("{what}{at}"));
            }
            _ if restated => {}
            Packet::Pip { cr3, nr } => lines.push(format!("paging, cr3: {cr3:016x}{}{at}", if nr { ", nr" } else { "" })),
            Packet::Vmcs(base) => lines.push(format!("vmcs, base: {base:016x}{at}")),
            Packet::Stop => lines.push("stopped".into()),
            Packet::Exstop { .. } => lines.push(format!("exstop{at}")),
            Packet::Mwait { hints, ext } => lines.push(format!("mwait {hints:x} {ext:x}{at}")),
            Packet::Pwre { hw, cstate, sub_cstate } => {
                lines.push(format!("pwre c{}.{}{}", (cstate + 1) & 0xf, (sub_cstate + 1) & 0xf, if hw { " hw" } else { "" }))
            }
            Packet::Pwrx { last_cstate, deepest_cstate, wake_reason } => {
                // Wake reasons: interrupt (bit 0), store (bit 2), hardware (bit 3).
                let mut s = String::from("pwrx ");
                for (bit, name) in [(0x1, "int: "), (0x4, "st: "), (0x8, "hw: ")] {
                    if wake_reason & bit != 0 {
                        s.push_str(name);
                    }
                }
                s.push_str(&format!("c{} (c{})", (last_cstate + 1) & 0xf, (deepest_cstate + 1) & 0xf));
                lines.push(s);
            }
            Packet::Ptw { payload, .. } => lines.push(format!("ptwrite: {payload:x}{at}")),
            Packet::Cbr(ratio) => lines.push(format!("cbr: {ratio:x}")),
            Packet::Evd { event_type, payload } => match event_type {
                0 => self.cr2 = Some(payload),
                1 => self.vmxq = Some(payload),
                2 => self.vmxr = Some(payload),
                _ => {}
            },
            Packet::Cfe { event_type, vector, .. } => {
                let data = |name: &str, v: Option<u64>| v.map(|v| format!(", {name}: {v:016x}")).unwrap_or_default();
                let (cr2, vmxq, vmxr) = (self.cr2.take(), self.vmxq.take(), self.vmxr.take());
                let what = match event_type {
                    1 => format!("interrupt {vector}{}", data("cr2", cr2)),
                    2 => "iret".into(),
                    3 => "smi".into(),
                    4 => "rsm".into(),
                    5 => format!("sipi: {vector:x}"),
                    6 => "init".into(),
                    7 => "vmentry".into(),
                    8 => format!("vmexit{}{}", data("vmxr", vmxr), data("vmxq", vmxq)),
                    9 => format!("vmexit, intr: {vector}{}{}", data("vmxr", vmxr), data("vmxq", vmxq)),
                    10 => "shutdown".into(),
                    12 => format!("uintr {vector}"),
                    13 => "uiret".into(),
                    14 => format!("swintr {vector}"),
                    15 => "syscall".into(),
                    _ => return,
                };
                // (A SIPI names no IP.)
                lines.push(if event_type == 5 { what } else { format!("{what}{at}") });
            }
            Packet::Mnt(payload) => lines.push(format!("mnt: {payload:x}")),
            Packet::Trig { trbv, mult, .. } => lines.push(format!("trig {trbv:x}{}{at}", if mult { ", mult" } else { "" })),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(status: &mut Status, packet: Packet, ip: Option<u64>, restated: bool) -> Vec<String> {
        let mut out = Vec::new();
        status.take(&packet, ip, restated, Show { ip: true, iflags: true }, &mut out);
        out
    }

    #[test]
    fn exec_mode_shows_changes_only() {
        let mut s = Status::default();
        let mode64 = Packet::ModeExec { csl: true, csd: false, if_flag: false };
        assert!(lines(&mut s, mode64, None, true).is_empty(), "a PSB+ restates");
        assert!(lines(&mut s, mode64, None, false).is_empty(), "no change");
        let mode64_if = Packet::ModeExec { csl: true, csd: false, if_flag: true };
        assert_eq!(lines(&mut s, mode64_if, Some(0x1002), false), ["interrupts enabled, ip: 0000000000001002"]);
        s.overflow();
        assert_eq!(lines(&mut s, mode64_if, None, false), ["exec mode: 64-bit"]);
    }

    #[test]
    fn transactions_mark_speculation() {
        let mut s = Status::default();
        assert!(lines(&mut s, Packet::ModeTsx { intx: true, abort: false }, None, true).is_empty());
        assert!(s.speculative);
        assert_eq!(lines(&mut s, Packet::ModeTsx { intx: false, abort: true }, Some(0x10), false), ["aborted, ip: 0000000000000010"]);
        assert!(!s.speculative);
        assert_eq!(lines(&mut s, Packet::Pwrx { last_cstate: 0, deepest_cstate: 15, wake_reason: 1 }, None, false), ["pwrx int: c1 (c0)"]);
    }
}
