//! CoreSight lines are streamed through the ordered merge, a few batches
//! per CPU in memory, instead of collected and sorted: the output is still
//! every CPU's lines in (time, CPU) order, each CPU's in its own order.

#[path = "common/mod.rs"]
mod common;

#[test]
fn coresight_lines_come_in_time_and_cpu_order() {
    let dir = testkit::fresh_dir(concat!(env!("CARGO_TARGET_TMPDIR"), "/decode-cs-stream"));
    let run = dir.join("run");
    common::simulate(&run, &["--arch", "aarch64", "--cpus", "3", "--instructions", "30000", "--pokes", "20", "--seed", "5"]);
    let run = run.to_str().unwrap();
    for itrace in ["--itrace=be", "--itrace=i"] {
        let out = common::poketrace(&["decode", run, itrace, "-F", "cpu,time,ip", "--ns"]);
        let lines: Vec<(String, String, &str)> = out
            .lines()
            .map(|l| {
                let mut f = l.split_whitespace();
                (f.next().unwrap().to_string(), f.next().unwrap().trim_end_matches(':').to_string(), l)
            })
            .collect();
        let cpus: std::collections::BTreeSet<&String> = lines.iter().map(|l| &l.0).collect();
        assert_eq!(cpus.len(), 3, "{itrace}: every CPU has lines");
        assert!(lines.len() > 3000, "{itrace}: {} lines", lines.len());
        // What sorting every line by (time, cpu) gives, each CPU's lines in
        // the order they came: the decode's own order.
        let mut sorted = lines.clone();
        sorted.sort_by(|a, b| {
            let time = |t: &str| t.split_once('.').map(|(s, ns)| (s.parse::<u64>().unwrap(), ns.parse::<u64>().unwrap())).unwrap();
            (time(&a.1), &a.0).cmp(&(time(&b.1), &b.0))
        });
        assert!(sorted == lines, "{itrace}: lines out of (time, cpu) order");
    }
}
