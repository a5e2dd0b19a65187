//! Where each kind of event goes: the (pid, tid) of every track. Tracks
//! that are not threads of the trace get process ids past any Linux pid.

/// A track: the (pid, tid) pair the format groups events by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Track {
    pub pid: u32,
    pub tid: u32,
}

const CPUS: u32 = 0x7fff_0001;
const DECODE: u32 = 0x7fff_0002;
const UNKNOWN: u32 = 0x7fff_0004;
/// Threads whose process no record names (per-thread buffers without COMM).
const UNKNOWN_PROCESS: u32 = 0x7fff_0005;
/// Idle tasks (tid 0), one a CPU, under process 0.
const IDLE_TID: u32 = 0x4000_0000;

/// The TEXT_POKE instants.
pub const CODE: Track = Track { pid: 0x7fff_0003, tid: 0 };
/// Problems with the input as a whole.
pub const INPUT: Track = Track { pid: DECODE, tid: 0x7fff_ffff };

/// A CPU (or a per-thread buffer): which thread ran, in which mode.
pub fn cpu(lane: u32) -> Track {
    Track { pid: CPUS, tid: lane }
}

/// Decode errors and uncertain spans of a CPU.
pub fn decode(lane: u32) -> Track {
    Track { pid: DECODE, tid: lane }
}

/// LOST records and damaged AUX data of a CPU (or of no known CPU).
pub fn lost(cpu: Option<u32>) -> Track {
    Track { pid: DECODE, tid: 0x1000_0000 + cpu.map_or(0xffff, |c| c & 0xffff) }
}

/// The call-stack track of a thread seen on `lane`: the real pid/tid,
/// except for idle tasks (all tid 0) and threads no record names.
pub fn thread(who: Option<(i32, i32)>, lane: u32) -> Track {
    match who {
        Some((_, 0)) => Track { pid: 0, tid: IDLE_TID + (lane & 0xffff) },
        Some((pid, tid)) if pid >= 0 => Track { pid: pid as u32, tid: tid as u32 },
        Some((_, tid)) => Track { pid: UNKNOWN_PROCESS, tid: tid as u32 },
        None => Track { pid: UNKNOWN, tid: lane },
    }
}

/// The lane of a line: its CPU, or its queue for per-thread buffers.
pub fn lane(cpu: u32, queue: usize) -> u32 {
    if cpu == u32::MAX {
        0x8000_0000 | queue as u32
    } else {
        cpu
    }
}

/// A lane's name on its track.
pub fn lane_name(lane: u32) -> String {
    if lane & 0x8000_0000 != 0 {
        format!("buffer {}", lane & 0x7fff_ffff)
    } else {
        format!("cpu {lane}")
    }
}
