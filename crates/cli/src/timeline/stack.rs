//! One thread's call stack as nested slices: calls push, returns pop to the
//! frame they return into. Frames open before the trace started are put
//! under the stack when a return leaves it (as magic-trace does); a return
//! that matches no frame unwinds them all, so slices never nest wrongly.

use anyhow::Result;

use super::names::{Name, Names};
use super::tef::{TefWriter, Track};

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
