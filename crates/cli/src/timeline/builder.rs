//! Decoded lines, in time order, made into the timeline's slices: each
//! branch moves its thread's call stack and its CPU's mode; errors and
//! uncertain instructions go to the decode track.

use std::collections::HashMap;

use anyhow::Result;
use tracedecode::{Kind, Out, Queue, Threads};

use super::cpu::{error_slice, Cpu, Mode};
use super::filter::Filter;
use super::names::{Name, Names};
use super::sideband::KsymbolAt;
use super::stack::{Cat, Stack};
use super::tef::TefWriter;
use super::tracks;
use super::tracks::Track;
use crate::symbols::Symbolizer;

/// What was made, for the summary.
#[derive(Default)]
pub struct Counts {
    pub lines: u64,
    pub errors: u64,
    pub overflows: u64,
    pub uncertain: u64,
    pub threads: u64,
}

pub struct Builder<'a> {
    pub w: TefWriter,
    filter: &'a Filter,
    threads: &'a Threads,
    queues: &'a [Queue<'a>],
    symbols: Symbolizer,
    /// KSYMBOL records in time order and how many are applied.
    ksymbols: Vec<KsymbolAt>,
    applied: usize,
    names: Names,
    stacks: HashMap<Track, Stack>,
    cpus: HashMap<u32, Cpu>,
    pub counts: Counts,
}

impl<'a> Builder<'a> {
    pub fn new(w: TefWriter, filter: &'a Filter, threads: &'a Threads, queues: &'a [Queue], symbols: Symbolizer, ksymbols: Vec<KsymbolAt>) -> Self {
        let (names, stacks, cpus, counts) = (Names::default(), HashMap::new(), HashMap::new(), Counts::default());
        Builder { w, filter, threads, queues, symbols, ksymbols, applied: 0, names, stacks, cpus, counts }
    }

    /// The slice name of the function at `addr`.
    fn name(&mut self, addr: u64) -> Name {
        match self.symbols.lookup(addr) {
            Some((sym, _)) => self.names.intern(sym),
            None => {
                let unknown = format!("[unknown] {}", self.symbols.dso(addr));
                self.names.intern(&unknown)
            }
        }
    }

    /// Takes one line.
    pub fn line(&mut self, l: &Out) -> Result<()> {
        if (l.cpu != u32::MAX && !self.filter.cpu(l.cpu)) || l.time < self.filter.start || l.time > self.filter.end {
            return Ok(());
        }
        self.counts.lines += 1;
        while self.ksymbols.get(self.applied).is_some_and(|k| k.time <= l.time) {
            self.ksymbols[self.applied].apply(&mut self.symbols);
            self.applied += 1;
        }
        let lane = tracks::lane(l.cpu, l.queue);
        if !self.cpus.contains_key(&lane) {
            let cpu = Cpu::new(lane, &mut self.w)?;
            self.cpus.insert(lane, cpu);
        }
        let t = l.time;
        lane_cpu(&mut self.cpus, lane).last_time = t;
        match l.kind {
            Kind::Error { offset, ip, code, ref reason } => {
                self.counts.errors += 1;
                self.counts.overflows += (code == 7) as u64;
                self.off(lane, t)?;
                let (name, args) = error_slice(code, reason, offset, ip);
                lane_cpu(&mut self.cpus, lane).error(t, name, args, &mut self.w)
            }
            Kind::Insn { ip, uncertain, .. } => {
                if self.filter.kernel_only && Mode::of(ip) == Mode::User {
                    return Ok(());
                }
                self.counts.uncertain += uncertain as u64;
                lane_cpu(&mut self.cpus, lane).instruction(t, uncertain, &mut self.w)
            }
            Kind::Branch { from, to, flags, from_len, .. } => {
                lane_cpu(&mut self.cpus, lane).decoded(t, &mut self.w)?;
                self.branch(l, lane, from, to, flags, from_len)
            }
        }
    }

    fn branch(&mut self, l: &Out, lane: u32, from: u64, to: u64, flags: &str, from_len: Option<u8>) -> Result<()> {
        let t = l.time;
        if flags.starts_with("tr end") {
            return self.off(lane, t);
        }
        let who = self.threads.at(&self.queues[l.queue], l.cpu, t);
        let kernel_only = self.filter.kernel_only;
        if !self.filter.tid(who.map(|w| w.1)) || (kernel_only && Mode::of(to) == Mode::User) {
            return self.off(lane, t);
        }
        let track = tracks::thread(who.map(|w| (w.0, w.1)), lane);
        let starts = flags == "tr strt" || from == 0 || (kernel_only && Mode::of(from) == Mode::User);
        if self.cpus[&lane].thread.as_ref().map(|(tr, _)| *tr) != Some(track) {
            let (label, process) = match who {
                Some((_, 0, _)) => (format!("swapper/{}", lane & 0xffff), "swapper".to_string()),
                Some((_, tid, comm)) if !comm.is_empty() => (format!("{comm} {tid}"), comm.to_string()),
                Some((pid, tid, _)) if pid >= 0 => (format!(":{tid}"), format!("pid {pid}")),
                Some((_, tid, _)) => (format!(":{tid}"), "unknown process".to_string()),
                None => (format!("unknown thread on {}", tracks::lane_name(lane)), "unknown threads".to_string()),
            };
            self.switch(lane, track, (label, process), t, if starts { to } else { from })?;
        }
        if starts {
            return Ok(());
        }
        let ret_to = from_len.map(|n| from + n as u64);
        let name = self.name(to);
        let (w, names) = (&mut self.w, &self.names);
        let stack = self.stacks.get_mut(&track).expect("switch made it");
        match flags {
            "call" => stack.push(t, name, ret_to, Cat::Call, w, names)?,
            "syscall" => stack.push(t, name, ret_to, Cat::Syscall, w, names)?,
            "int" => stack.push(t, name, ret_to, Cat::Interrupt, w, names)?,
            "hw int" => stack.push(t, name, Some(from), Cat::Interrupt, w, names)?,
            "return" => stack.ret(t, to, name, w, names)?,
            // perf gives an exception return (ERET) no flags.
            "iret" | "sysret" | "" => stack.exception_return(t, to, name, w, names)?,
            _ => stack.jump(t, name, w, names)?,
        }
        let interrupts = stack.interrupts();
        lane_cpu(&mut self.cpus, lane).update_mode(t, to, interrupts, &mut self.w)
    }

    /// `track` (named: thread, process) runs on `lane` from `t`, at `ip`; the thread there before stops.
    fn switch(&mut self, lane: u32, track: Track, (label, process): (String, String), t: u64, ip: u64) -> Result<()> {
        if let Some((old, _)) = self.cpus[&lane].thread {
            if let Some(s) = self.stacks.get_mut(&old) {
                s.flush(&mut self.w, &self.names)?;
            }
        }
        if !self.stacks.contains_key(&track) {
            self.counts.threads += 1;
            self.w.name_track(track, Some(&label), Some(&process), None)?;
            self.stacks.insert(track, Stack::new(track));
        }
        let name = self.name(ip);
        let stack = self.stacks.get_mut(&track).expect("inserted");
        if stack.is_empty() {
            stack.start(t, name, &mut self.w, &self.names)?;
        }
        let interrupts = stack.interrupts();
        let cpu = lane_cpu(&mut self.cpus, lane);
        cpu.enter(t, track, label, Mode::of(ip), &mut self.w)?;
        cpu.update_mode(t, ip, interrupts, &mut self.w)
    }

    /// Tracing stops on `lane` at `t`: its thread's frames and its slices end.
    fn off(&mut self, lane: u32, t: u64) -> Result<()> {
        let cpu = lane_cpu(&mut self.cpus, lane);
        let Some((track, _)) = cpu.thread else { return Ok(()) };
        cpu.leave(t, &mut self.w)?;
        cpu.settle(t, &mut self.w)?;
        if let Some(s) = self.stacks.get_mut(&track) {
            s.close(t, &mut self.w, &self.names)?;
        }
        Ok(())
    }

    /// Ends everything still open at each lane's last time; the writer, and the stack restarts.
    pub fn finish(mut self) -> Result<(TefWriter, Counts, u64)> {
        let mut lanes: Vec<(u32, u64)> = self.cpus.values().map(|c| (c.lane, c.last_time)).collect();
        lanes.sort();
        for (lane, t) in lanes {
            self.off(lane, t)?;
            lane_cpu(&mut self.cpus, lane).settle(t, &mut self.w)?;
        }
        // Threads switched out with frames open end at the last time seen.
        let end = self.cpus.values().map(|c| c.last_time).max().unwrap_or(0);
        let mut open: Vec<Track> = self.stacks.iter().filter(|(_, s)| !s.is_empty()).map(|(t, _)| *t).collect();
        open.sort_by_key(|t| (t.pid, t.tid));
        for track in open {
            self.stacks.get_mut(&track).expect("listed").close(end, &mut self.w, &self.names)?;
        }
        let restarts = self.stacks.values().map(|s| s.restarts).sum();
        Ok((self.w, self.counts, restarts))
    }
}

fn lane_cpu(cpus: &mut HashMap<u32, Cpu>, lane: u32) -> &mut Cpu {
    cpus.get_mut(&lane).expect("every lane seen has its Cpu")
}
