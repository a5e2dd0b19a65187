//! Random walks through real code: an ELF file's executable segments run by
//! simulated CPUs that take random branch outcomes. Any such path is a valid
//! trace of that code, which is what decoders need to be compared on real
//! instructions (a gcc-compiled program, /usr/bin/perf, a vmlinux).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};

use crate::machine::{decode, Flow, Kind, Sink};
use crate::rng::Rng;
use crate::SimError;

/// One executable segment as mapped.
#[derive(Clone, Debug)]
pub struct Segment {
    pub addr: u64,
    pub file_offset: u64,
    pub bytes: Vec<u8>,
}

/// An ELF file's code at its load address, and where functions start.
#[derive(Clone, Debug)]
pub struct RealCode {
    pub path: PathBuf,
    pub segments: Vec<Segment>,
    /// Function entries (symbols of type function with a size), sorted.
    pub functions: Vec<u64>,
}

impl RealCode {
    /// Loads `path`; position-independent files go at `pie_base`.
    pub fn load(path: &Path, pie_base: u64) -> Result<RealCode, SimError> {
        let io = |source| SimError::Io { path: path.to_path_buf(), source };
        let data = std::fs::read(path).map_err(io)?;
        let bad = |e: object::read::Error| SimError::Config(format!("{}: {e}", path.display()));
        let file = object::File::parse(&data[..]).map_err(bad)?;
        let bias = if file.kind() == object::ObjectKind::Dynamic { pie_base } else { 0 };
        let segments: Vec<Segment> = codeimage::exec_segments(&file, &data)
            .into_iter()
            .map(|s| Segment { addr: s.addr + bias, file_offset: s.file_offset, bytes: s.bytes.to_vec() })
            .collect();
        // Function symbols; a stripped file still has its dynamic ones, and
        // its entry point. Those are few (24 in Debian's /usr/bin/perf), and
        // walks among so few stay in a few hundred blocks: a stripped file's
        // functions are also the targets of its direct calls.
        let stripped = file.symbols().next().is_none();
        let mut functions: Vec<u64> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .map(|s| s.address())
            .chain(std::iter::once(file.entry()).filter(|&e| e != 0))
            .map(|a| a + bias)
            .chain(segments.iter().filter(|_| stripped).flat_map(call_targets))
            .filter(|&a| segments.iter().any(|g| a >= g.addr && a < g.addr + g.bytes.len() as u64))
            .collect();
        functions.sort_unstable();
        functions.dedup();
        if segments.is_empty() || functions.is_empty() {
            return Err(SimError::Config(format!("{}: no executable segment with function symbols", path.display())));
        }
        Ok(RealCode { path: path.to_path_buf(), segments, functions })
    }

    fn bytes_at(&self, addr: u64) -> &[u8] {
        for s in &self.segments {
            if addr >= s.addr && addr < s.addr + s.bytes.len() as u64 {
                return &s.bytes[(addr - s.addr) as usize..];
            }
        }
        &[]
    }
}

/// The targets of the direct calls in `seg`'s code, decoded from its start.
fn call_targets(seg: &Segment) -> Vec<u64> {
    let mut decoder = iced_x86::Decoder::with_ip(64, &seg.bytes, seg.addr, iced_x86::DecoderOptions::NONE);
    decoder
        .iter()
        .filter(|i| i.flow_control() == iced_x86::FlowControl::Call && i.op0_kind() == iced_x86::OpKind::NearBranch64)
        .map(|i| i.near_branch_target())
        .collect()
}

/// Runs `cpus` CPUs through `code` for `instructions` each (on average).
/// Calls and jumps through registers go to a random function; a return with
/// nothing to return to, and anything that cannot be walked (invalid bytes,
/// system calls, traps, a direct branch out of the file) ends the path with
/// an interrupt to a random function.
pub fn walk(code: &RealCode, cpus: u32, instructions: u64, time_zero: u64, rng: &mut Rng, sink: &mut impl Sink) -> u64 {
    let mut cache: HashMap<u64, crate::machine::Decoded> = HashMap::new();
    let pick = |rng: &mut Rng| code.functions[rng.below(code.functions.len() as u64) as usize];
    let mut pcs: Vec<u64> = (0..cpus).map(|_| pick(rng)).collect();
    let mut stacks: Vec<Vec<u64>> = vec![Vec::new(); cpus as usize];
    let total = instructions * cpus as u64;
    for tick in 0..total {
        let c = rng.below(cpus as u64) as usize;
        let pc = pcs[c];
        let d = *cache.entry(pc).or_insert_with(|| decode(code.bytes_at(pc), pc));
        let next = pc + d.len as u64;
        let stack = &mut stacks[c];
        let (to, flow) = match d.kind {
            Kind::Next => (next, Flow::Quiet),
            Kind::Cond(target) => {
                let taken = if target <= pc { rng.chance(3, 5) } else { rng.chance(1, 2) };
                (if taken { target } else { next }, Flow::Cond { taken })
            }
            Kind::Jmp(target) => (target, Flow::Quiet),
            Kind::Call(target) => {
                stack.push(next);
                (target, Flow::Quiet)
            }
            Kind::IndCall | Kind::IndJmp => {
                if matches!(d.kind, Kind::IndCall) {
                    stack.push(next);
                }
                let to = pick(rng);
                (to, Flow::Indirect { to })
            }
            Kind::Ret => {
                let to = stack.pop().unwrap_or_else(|| pick(rng));
                (to, Flow::Return { to })
            }
            Kind::Int3 | Kind::Iret | Kind::Stop | Kind::Undefined => {
                let to = pick(rng);
                stack.clear();
                (to, Flow::Trap { from: pc, to })
            }
        };
        // A path that leaves the code (a direct branch out of the file)
        // restarts elsewhere, by an interrupt the trace shows (FUP + TIP),
        // as anything else that cannot be walked.
        let (to, flow) = if code.bytes_at(to).is_empty() {
            let to = pick(rng);
            stack.clear();
            (to, Flow::Trap { from: pc, to })
        } else {
            (to, flow)
        };
        if stack.len() > 1024 {
            stack.remove(0);
        }
        pcs[c] = to;
        sink.instruction(c as u32, time_zero + tick, pc, flow, to);
    }
    total
}
