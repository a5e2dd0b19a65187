//! libipt's block decoder (Intel's reference, through `libipt-sys`) as the
//! oracle for the instruction flow: both decoders read the same per-CPU
//! packet streams of simulated runs and the same code, and must report the
//! same instructions in the same order, the same asynchronous branches
//! (FUP + TIP: INT3 traps), the same ends of tracing and the same errors.
//!
//! - Static code (`--pokes 0`; the generated kernel, and random walks
//!   through /usr/bin/perf's real code): ours over [`Static`] and libipt with
//!   the code as file sections, as cached sections and through a read
//!   callback agree event for event, and both agree with the simulator's
//!   truth. (On the stream as hardware would start it: see
//!   `without_start_pge` in `common/flow.rs` for why libipt rejects the
//!   simulator's first PSB segment.)
//! - Code being poked (`int3`): libipt, which has one image and no notion
//!   of time, and ours over [`Static`] (resuming at the next PSB after an
//!   error, as libipt does: [`Recovery::NextPsb`]) both go wrong on the same
//!   trace, in the same way; ours over [`Interval`] decodes it exactly.

#[path = "common/flow.rs"]
mod flow;

use std::path::Path;

use codeimage::window::{Interval, Static};
use flow::{Ev, ImageKind, LibiptImage, Run};
use intel_pt::flow::Recovery;
use sim::SimConfig;

/// The truth's instruction addresses for one CPU.
fn truth(run: &Run, cpu: usize) -> Vec<u64> {
    sim::TruthReader::open(&run.dir.join(format!("truth/cpu{cpu}.bin"))).unwrap().map(|r| r.unwrap().1).collect()
}

/// The executed instructions a decode reports: a trap's FUP names an INT3
/// that ran (the simulated kernel traps only on INT3), so it counts as one.
fn executed(evs: &[Ev]) -> Vec<u64> {
    evs.iter()
        .filter_map(|e| match *e {
            Ev::Insn(ip) | Ev::Trap { from: ip, .. } => Some(ip),
            _ => None,
        })
        .collect()
}

fn errors(evs: &[Ev]) -> usize {
    evs.iter().filter(|e| matches!(e, Ev::Error { .. } | Ev::Overflow)).count()
}

/// Where two event lists part, with some context, or `None`.
fn first_difference(a: &[Ev], b: &[Ev]) -> Option<String> {
    let i = a.iter().zip(b).position(|(x, y)| x != y).or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))?;
    let ctx = |v: &[Ev]| format!("{:x?}", &v[i.saturating_sub(3)..(i + 3).min(v.len())]);
    Some(format!("event {i} (of {} / {}): ours {} libipt {}", a.len(), b.len(), ctx(a), ctx(b)))
}

/// What one static-code run's comparison counted.
#[derive(Default)]
struct Compared {
    events: usize,
    instructions: usize,
    lost_on_start: usize,
}

/// Ours over [`Static`] against the truth and against libipt (three ways of
/// giving it the code), CPU by CPU.
fn compare_static(name: &str, summary: &sim::Summary, run: &Run) -> Compared {
    let mut c = Compared::default();
    assert!(run.cfg.noretcomp, "the simulator traces with noretcomp");
    let images = [ImageKind::File, ImageKind::Cached, ImageKind::Callback].map(|k| (k, LibiptImage::new(run, k)));
    for (cpu, trace) in run.aux.iter().enumerate() {
        let ours = flow::ours(trace, &Static(&run.bare), &run.cfg);
        assert_eq!(errors(&ours), 0, "{name} cpu {cpu}: {:?}", ours.iter().find(|e| matches!(e, Ev::Error { .. })));
        let t = truth(run, cpu);
        assert_eq!(t.len() as u64, summary.instructions[cpu]);
        assert!(executed(&ours) == t, "{name} cpu {cpu}: decoded flow differs from the truth");
        assert!(matches!(ours.last(), Some(Ev::End(Some(_)))), "ends with FUP + TIP.PGD");

        // The stream as hardware would start it (see `without_start_pge`):
        // the same flow for us, and event for event the same for libipt
        // however it is given the code.
        let (fixed, pge) = flow::without_start_pge(trace);
        assert!(flow::ours(&fixed, &Static(&run.bare), &run.cfg) == ours);
        for (kind, image) in &images {
            let theirs = flow::libipt(&fixed, image, flow::CPU, &run.bare);
            if let Some(d) = first_difference(&ours, &theirs) {
                panic!("{name} cpu {cpu}, libipt {kind:?}: {d}");
            }
        }

        // The simulator's own stream. While it starts with PSB+ (FUP) and
        // TIP.PGE, libipt rejects the start and loses the first PSB
        // segment, then agrees to the end; once the simulator starts as
        // hardware does, the two streams are the same.
        let theirs = flow::libipt(trace, &images[0].1, flow::CPU, &run.bare);
        if pge.is_some() {
            assert!(matches!(&theirs[0], Ev::Error { what, .. } if what.starts_with("no memory mapped")), "{:?}", theirs[0]);
            assert_eq!(errors(&theirs), 1);
            assert!(ours.ends_with(&theirs[1..]), "{name} cpu {cpu}: libipt after its first error is not a suffix of ours");
            c.lost_on_start += executed(&ours).len() - executed(&theirs).len();
        } else {
            assert!(first_difference(&ours, &theirs).is_none());
        }
        c.events += ours.len();
        c.instructions += t.len();
    }
    c
}

#[test]
fn static_code_same_flow_as_libipt() {
    let mut total = Compared::default();
    // Three seeds and TSC periods: different programs, paths and packet mixes.
    for (seed, tsc_period, insns) in [(1, 200, 40_000), (7, 35, 40_000), (3, 1000, 100_000)] {
        let cfg = SimConfig { cpus: 4, protocol: sim::Protocol::None, pokes: 0, instructions: insns, seed, tsc_period, ..SimConfig::default() };
        let name = format!("static-{seed}");
        let (summary, run) = flow::simulate(&name, &cfg, None);
        let c = compare_static(&name, &summary, &run);
        total.events += c.events;
        total.instructions += c.instructions;
        total.lost_on_start += c.lost_on_start;
    }
    eprintln!(
        "static code: {} events ({} instructions) compared with libipt (3 images), 0 disagreements; \
         on the simulator's unmodified start libipt loses {} instructions (the first PSB segment of each CPU)",
        total.events, total.instructions, total.lost_on_start
    );
}

/// Real code: random walks through /usr/bin/perf's 2.4 MB of text
/// (`simulate --elf`), a user program mapped by MMAP2.
#[test]
fn real_code_same_flow_as_libipt() {
    let elf = Path::new("/usr/bin/perf");
    if !elf.is_file() {
        eprintln!("skipped: no {} (Debian's linux-perf)", elf.display());
        return;
    }
    let cfg = SimConfig { cpus: 4, protocol: sim::Protocol::None, pokes: 0, instructions: 50_000, ..SimConfig::default() };
    let (summary, run) = flow::simulate("elf-perf", &cfg, Some(elf));
    assert!(run.sections.iter().any(|s| s.path == elf), "{:?}", run.sections);
    let c = compare_static("elf-perf", &summary, &run);
    eprintln!("real code (/usr/bin/perf): {} events ({} instructions) compared with libipt (3 images), 0 disagreements", c.events, c.instructions);
}

#[test]
fn poked_code_libipt_goes_wrong_interval_does_not() {
    // text_poke_bp (int3) with fine timing: what `sim`'s own test decodes exactly.
    let cfg = SimConfig { cpus: 4, protocol: sim::Protocol::Int3, pokes: 200, instructions: 60_000, tsc_period: 20, ..SimConfig::default() };
    let (summary, run) = flow::simulate("int3", &cfg, None);
    assert!(summary.pokes > 100, "{summary:?}");
    let image = LibiptImage::new(&run, ImageKind::File);
    let (mut libipt_errors, mut traps, mut libipt_traps, mut compared, mut decoded_total, mut truth_total) = (0, 0, 0, 0, 0, 0);
    let mut kinds = std::collections::BTreeMap::<(String, String), usize>::new();
    for (cpu, trace) in run.aux.iter().enumerate() {
        // Ours over the code timeline: exactly the truth, every trap included.
        let t = truth(&run, cpu);
        let timeline = flow::ours(trace, &Interval(&run.full), &run.cfg);
        assert_eq!(errors(&timeline), 0, "cpu {cpu}: {:?}", timeline.iter().find(|e| matches!(e, Ev::Error { .. })));
        assert!(executed(&timeline) == t, "cpu {cpu}: the timeline decode differs from the truth");
        traps += timeline.iter().filter(|e| matches!(e, Ev::Trap { .. })).count();

        // libipt has one image: the code before any change. Ours over the
        // same static image, resuming at the next PSB after an error as
        // libipt does, makes the same mistakes, at the same places: the
        // same instructions, traps and error offsets, event for event.
        let (fixed, _) = flow::without_start_pge(trace);
        let theirs = flow::libipt(&fixed, &image, flow::CPU, &run.bare);
        let ours = flow::ours_with(&fixed, &Static(&run.bare), &run.cfg, Recovery::NextPsb);
        let key = |v: &[Ev]| v.iter().map(Ev::key).collect::<Vec<_>>();
        if let Some(d) = first_difference(&key(&ours), &key(&theirs)) {
            panic!("cpu {cpu}, static image: {d}");
        }
        for (a, b) in ours.iter().zip(&theirs) {
            if let (Ev::Error { what: a, .. }, Ev::Error { what: b, .. }) = (a, b) {
                *kinds.entry((a.clone(), b.clone())).or_default() += 1;
            }
        }
        compared += ours.len();
        libipt_errors += errors(&theirs);
        libipt_traps += theirs.iter().filter(|e| matches!(e, Ev::Trap { .. })).count();
        let decoded = executed(&theirs);
        decoded_total += decoded.len();
        truth_total += t.len();
        let right = decoded.iter().zip(&t).take_while(|(a, b)| a == b).count();
        let first_error = theirs.iter().position(|e| matches!(e, Ev::Error { .. })).unwrap();
        let before_error = theirs[..first_error].iter().filter(|e| matches!(e, Ev::Insn(_) | Ev::Trap { .. })).count();
        eprintln!(
            "cpu {cpu}: libipt {} errors; right for the first {right} of {} instructions, then {} wrong ones before its first error",
            errors(&theirs),
            t.len(),
            before_error - right
        );
    }
    eprintln!(
        "int3 run ({} pokes): ours over Interval exact ({truth_total} instructions, {traps} traps); \
         libipt {libipt_errors} errors, decodes {decoded_total} instructions and {libipt_traps} traps",
        summary.pokes
    );
    eprintln!("static image, ours vs libipt: {compared} events the same; errors (ours, libipt): {kinds:?}");
    assert!(libipt_errors > 0 && libipt_traps > 0 && traps > 0);
}
