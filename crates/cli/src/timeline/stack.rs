//! One thread's call stack as nested slices: calls push, returns pop to the
//! frame they return into. Frames open before the trace started are put
//! under the stack when a return leaves it (as magic-trace does); a return
//! that matches no frame unwinds them all, so slices never nest wrongly.

use anyhow::Result;

use super::names::{Name, Names};
use super::tef::TefWriter;
use super::tracks::Track;

/// Events of a run kept back so that frames found later can go under them.
const PENDING_MAX: usize = 1024;

/// What opened a frame: the slice's category.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cat {
    /// Running when the trace (re)started.
    Start,
    Call,
    /// Entered by a return out of every frame seen: the caller, inferred.
    Inferred,
    Syscall,
    Interrupt,
}

impl Cat {
    fn name(self) -> &'static str {
        match self {
            Cat::Start => "start",
            Cat::Call => "call",
            Cat::Inferred => "inferred",
            Cat::Syscall => "syscall",
            Cat::Interrupt => "interrupt",
        }
    }
}

struct Frame {
    name: Name,
    /// Where the call returns to, when a call opened the frame.
    ret: Option<u64>,
    cat: Cat,
}

enum Ev {
    Begin(u64, Name, Cat),
    End(u64, Name),
}

/// A thread's frames and the events of its current run not yet written.
pub struct Stack {
    pub track: Track,
    frames: Vec<Frame>,
    pending: Vec<Ev>,
    /// When the run began, while all its events are pending.
    run_start: Option<u64>,
    /// Returns out of every frame after the run's first events were written: the stack restarted there.
    pub restarts: u64,
}

impl Stack {
    pub fn new(track: Track) -> Stack {
        Stack { track, frames: Vec::new(), pending: Vec::new(), run_start: None, restarts: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Interrupt frames open.
    pub fn interrupts(&self) -> usize {
        self.frames.iter().filter(|f| f.cat == Cat::Interrupt).count()
    }

    fn emit(&mut self, ev: Ev, w: &mut TefWriter, names: &Names) -> Result<()> {
        if self.run_start.is_some() {
            self.pending.push(ev);
            if self.pending.len() >= PENDING_MAX {
                self.flush(w, names)?;
            }
            return Ok(());
        }
        write(self.track, &ev, w, names)
    }

    /// Writes what is pending: frames found from now on cannot go under it.
    pub fn flush(&mut self, w: &mut TefWriter, names: &Names) -> Result<()> {
        for ev in self.pending.drain(..) {
            write(self.track, &ev, w, names)?;
        }
        self.run_start = None;
        Ok(())
    }

    /// Tracing (re)starts in `name` at `t` with nothing open.
    pub fn start(&mut self, t: u64, name: Name, w: &mut TefWriter, names: &Names) -> Result<()> {
        debug_assert!(self.frames.is_empty());
        self.run_start = Some(t);
        self.push(t, name, None, Cat::Start, w, names)
    }

    pub fn push(&mut self, t: u64, name: Name, ret: Option<u64>, cat: Cat, w: &mut TefWriter, names: &Names) -> Result<()> {
        self.frames.push(Frame { name, ret, cat });
        self.emit(Ev::Begin(t, name, cat), w, names)
    }

    fn pop_to(&mut self, depth: usize, t: u64, w: &mut TefWriter, names: &Names) -> Result<()> {
        while self.frames.len() > depth {
            let f = self.frames.pop().expect("deeper than depth");
            self.emit(Ev::End(t, f.name), w, names)?;
        }
        Ok(())
    }

    /// A return (or exception return) to `to`, in function `name`.
    pub fn ret(&mut self, t: u64, to: u64, name: Name, w: &mut TefWriter, names: &Names) -> Result<()> {
        if let Some(i) = self.frames.iter().rposition(|f| f.ret == Some(to)) {
            return self.pop_to(i, t, w, names);
        }
        // Returned into a function on the stack, somewhere other than its call's return address.
        if let Some(i) = self.frames.iter().rposition(|f| f.name == name) {
            return self.pop_to(i + 1, t, w, names);
        }
        self.pop_to(0, t, w, names)?;
        self.frames.push(Frame { name, ret: None, cat: Cat::Inferred });
        match self.run_start {
            Some(start) => self.pending.insert(0, Ev::Begin(start, name, Cat::Inferred)),
            None => {
                self.restarts += 1;
                write(self.track, &Ev::Begin(t, name, Cat::Inferred), w, names)?;
            }
        }
        Ok(())
    }

    /// An exception return (IRET, SYSRET, ERET) to `to`: leaves the innermost
    /// interrupt or system call. Where it returns into another function than
    /// the interrupted one (an int3 handler emulating a call or a jump), that
    /// function goes on top, and a later return pops it with the frame under
    /// it whose return address or function it reaches.
    pub fn exception_return(&mut self, t: u64, to: u64, name: Name, w: &mut TefWriter, names: &Names) -> Result<()> {
        let Some(i) = self.frames.iter().rposition(|f| matches!(f.cat, Cat::Interrupt | Cat::Syscall)) else {
            return self.ret(t, to, name, w, names);
        };
        let entered_from = self.frames[i].ret;
        self.pop_to(i, t, w, names)?;
        match (entered_from, self.frames.last()) {
            (Some(ret), _) if ret == to => Ok(()),
            (_, None) => self.ret(t, to, name, w, names),
            (_, Some(top)) if top.name == name => Ok(()),
            _ => self.push(t, name, None, Cat::Call, w, names),
        }
    }

    /// A jump to another function (a tail call): the top frame becomes it.
    pub fn jump(&mut self, t: u64, name: Name, w: &mut TefWriter, names: &Names) -> Result<()> {
        let Some(top) = self.frames.last() else { return Ok(()) };
        if top.name == name {
            return Ok(());
        }
        let (ret, cat) = (top.ret, top.cat);
        self.pop_to(self.frames.len() - 1, t, w, names)?;
        self.push(t, name, ret, cat, w, names)
    }

    /// Tracing stops at `t`: every frame ends.
    pub fn close(&mut self, t: u64, w: &mut TefWriter, names: &Names) -> Result<()> {
        self.pop_to(0, t, w, names)?;
        self.flush(w, names)
    }
}

fn write(track: Track, ev: &Ev, w: &mut TefWriter, names: &Names) -> Result<()> {
    match *ev {
        Ev::Begin(t, name, cat) => w.begin(track, t, names.get(name), cat.name()),
        Ev::End(t, name) => w.end(track, t, names.get(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (phase, time, name) lines a stack writes for `steps`.
    fn run(steps: impl FnOnce(&mut Stack, &mut TefWriter, &mut Names)) -> Vec<(String, u64, String)> {
        let path = std::env::temp_dir().join(format!("poketrace-stack-test-{}-{:?}.json", std::process::id(), std::thread::current().id()));
        let mut w = TefWriter::create(&path, 0).unwrap();
        let mut names = Names::default();
        let mut s = Stack::new(Track { pid: 1, tid: 1 });
        steps(&mut s, &mut w, &mut names);
        w.finish().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        let ev = v["traceEvents"].as_array().unwrap().iter();
        ev.map(|e| {
            (e["ph"].as_str().unwrap().into(), (e["ts"].as_f64().unwrap() * 1000.0 + 0.0005).floor() as u64, e["name"].as_str().unwrap().into())
        })
        .collect()
    }

    fn ev(ph: &str, t: u64, name: &str) -> (String, u64, String) {
        (ph.into(), t, name.into())
    }

    /// Returns out of the frame the trace started in put the callers under it, from the start.
    #[test]
    fn callers_open_at_the_start_are_inferred() {
        let got = run(|s, w, n| {
            let (f, g, h, k) = (n.intern("f"), n.intern("g"), n.intern("h"), n.intern("k"));
            s.start(10, f, w, n).unwrap();
            s.push(20, k, Some(0x105), Cat::Call, w, n).unwrap();
            s.ret(30, 0x105, f, w, n).unwrap();
            s.ret(40, 0x900, g, w, n).unwrap();
            s.ret(50, 0xa00, h, w, n).unwrap();
            s.close(60, w, n).unwrap();
        });
        let want = [
            ev("B", 10, "h"),
            ev("B", 10, "g"),
            ev("B", 10, "f"),
            ev("B", 20, "k"),
            ev("E", 30, "k"),
            ev("E", 40, "f"),
            ev("E", 50, "g"),
            ev("E", 60, "h"),
        ];
        assert_eq!(got, want);
    }

    /// A return to no return address on the stack goes to the frame of its
    /// function, or, if none, unwinds all: never one pop too few or too many.
    #[test]
    fn mismatched_returns_never_nest_wrongly() {
        let got = run(|s, w, n| {
            let (f, a, b, x) = (n.intern("f"), n.intern("a"), n.intern("b"), n.intern("x"));
            s.start(0, f, w, n).unwrap();
            s.push(1, a, Some(0x10), Cat::Call, w, n).unwrap();
            s.push(2, b, Some(0x20), Cat::Call, w, n).unwrap();
            // b returns into f, past a (a return address changed under it).
            s.ret(3, 0x77, f, w, n).unwrap();
            s.push(4, a, Some(0x10), Cat::Call, w, n).unwrap();
            // Back into a function nowhere on the stack.
            s.ret(5, 0x99, x, w, n).unwrap();
            s.close(6, w, n).unwrap();
        });
        let want = [
            ev("B", 0, "x"),
            ev("B", 0, "f"),
            ev("B", 1, "a"),
            ev("B", 2, "b"),
            ev("E", 3, "b"),
            ev("E", 3, "a"),
            ev("B", 4, "a"),
            ev("E", 5, "a"),
            ev("E", 5, "f"),
            ev("E", 6, "x"),
        ];
        assert_eq!(got, want);
    }

    /// Once a run's first events are written, an unknown caller restarts the stack at the return.
    #[test]
    fn after_the_first_events_are_written_the_stack_restarts() {
        let mut restarts = 0;
        let got = run(|s, w, n| {
            let (f, g, c) = (n.intern("f"), n.intern("g"), n.intern("c"));
            s.start(0, f, w, n).unwrap();
            for i in 0..PENDING_MAX as u64 {
                s.push(1 + 2 * i, c, Some(1), Cat::Call, w, n).unwrap();
                s.ret(2 + 2 * i, 1, f, w, n).unwrap();
            }
            s.ret(5000, 0x50, g, w, n).unwrap();
            s.close(5001, w, n).unwrap();
            restarts = s.restarts;
        });
        assert_eq!(restarts, 1);
        assert_eq!(got[0], ev("B", 0, "f"));
        assert_eq!(got[got.len() - 3..], [ev("E", 5000, "f"), ev("B", 5000, "g"), ev("E", 5001, "g")]);
    }

    /// An int3 handler that returns elsewhere (emulating a jump or a call)
    /// leaves the interrupt; the function it returns into goes on top until
    /// a return reaches a frame below.
    #[test]
    fn an_emulating_exception_return_leaves_the_interrupt() {
        let got = run(|s, w, n| {
            let (f, hook, int3, leaf) = (n.intern("f"), n.intern("hook"), n.intern("int3"), n.intern("leaf"));
            s.start(0, f, w, n).unwrap();
            s.push(1, hook, Some(0x105), Cat::Call, w, n).unwrap();
            s.push(2, int3, Some(0x200), Cat::Interrupt, w, n).unwrap();
            s.exception_return(3, 0x300, leaf, w, n).unwrap();
            s.ret(4, 0x105, f, w, n).unwrap();
            s.close(5, w, n).unwrap();
        });
        let want = [
            ev("B", 0, "f"),
            ev("B", 1, "hook"),
            ev("B", 2, "int3"),
            ev("E", 3, "int3"),
            ev("B", 3, "leaf"),
            ev("E", 4, "leaf"),
            ev("E", 4, "hook"),
            ev("E", 5, "f"),
        ];
        assert_eq!(got, want);
    }
}
