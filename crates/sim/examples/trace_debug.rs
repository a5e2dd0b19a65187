//! Prints truth and decoded flow around their first difference (debugging aid).
use std::path::Path;

use intel_pt::flow::FlowEvent;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(&args[1]);
    let cpu: usize = args[2].parse().unwrap();
    let truth: Vec<(u64, u64)> = sim::TruthReader::open(&dir.join(format!("truth/cpu{cpu}.bin"))).unwrap().map(|r| r.unwrap()).collect();
    let events = sim::check::decode_cpu(dir, cpu).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut k = 0;
    let mut first = None;
    for (i, e) in events.iter().enumerate() {
        let ip = match e {
            FlowEvent::Insn { ip, .. } => Some(*ip),
            FlowEvent::Trap { from, .. } => Some(*from),
            _ => None,
        };
        if let Some(ip) = ip {
            if truth.get(k).map(|t| t.1) != Some(ip) {
                first = Some((i, k));
                break;
            }
            k += 1;
        }
    }
    if let Some(at) = events.iter().position(|e| matches!(e, FlowEvent::Error { .. })) {
        println!("first error at event {at}:");
        for e in &events[at.saturating_sub(25)..(at + 3).min(events.len())] {
            println!("  {e:x?}");
        }
    }
    let Some((i, k)) = first else {
        println!("no difference in {} events", events.len());
        return;
    };
    for e in &events[i.saturating_sub(12)..(i + 8).min(events.len())] {
        println!("decoded {e:x?}");
    }
    for (t, a) in &truth[k.saturating_sub(8)..(k + 8).min(truth.len())] {
        println!("truth {t} {a:#x}");
    }
}
