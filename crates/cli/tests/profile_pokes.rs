//! Poke-aware counting: on a simulated kernel run whose jump labels flip
//! while it runs, `profile --kernel` counts each site's JMP runs as taken
//! branches and its NOP runs inside fall-through ranges, as the ground
//! truth has them (with what it counts apart as uncertain, in FILE.uncertain);
//! the profile of the static image, and perf's model of one image updated
//! in time order, are printed beside it, and the static one is wrong.
//! FILE.pokes lists the sites with those counts.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A jump-label site: its address, its length, and where its JMP goes.
struct Site {
    len: u64,
    targets: Vec<u64>,
}

/// Where the jump `bytes` at `addr` goes, if it is one: x86 JMP rel32 or
/// rel8, AArch64 B.
fn jump_target(addr: u64, bytes: &[u8]) -> Option<u64> {
    match bytes {
        [0xe9, r @ ..] if r.len() == 4 => Some((addr + 5).wrapping_add_signed(i32::from_le_bytes(r.try_into().unwrap()).into())),
        [0xeb, r] => Some((addr + 2).wrapping_add_signed((*r as i8).into())),
        [a, b, c, d] if d & 0xfc == 0x14 => {
            let imm = u32::from_le_bytes([*a, *b, *c, *d]) & 0x03ff_ffff;
            Some(addr.wrapping_add_signed((((imm << 6) as i32) >> 4).into()))
        }
        _ => None,
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The jump-label sites of `dir`'s pokes.
fn sites(dir: &Path) -> BTreeMap<u64, Site> {
    let out = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(["pokes", "--json"]).arg(dir).output().unwrap();
    let text = String::from_utf8(testkit::success(out, "poketrace pokes")).unwrap();
    let mut sites: BTreeMap<u64, Site> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["kind"] != "jump-label" {
            continue;
        }
        let addr = v["addr"].as_u64().unwrap();
        let site = sites.entry(addr).or_insert(Site { len: v["new_len"].as_u64().unwrap(), targets: Vec::new() });
        for side in ["old", "new"] {
            site.targets.extend(jump_target(addr, &hex_bytes(v[side].as_str().unwrap())));
        }
    }
    sites
}

/// (taken, not taken) per site, from the ground truth: each run of a site
/// and where the CPU went next (a trap into the INT3 handler is neither).
fn truth(dir: &Path, cpus: u32, sites: &BTreeMap<u64, Site>) -> HashMap<u64, (u64, u64)> {
    let mut counts: HashMap<u64, (u64, u64)> = HashMap::new();
    for cpu in 0..cpus {
        let mut prev: Option<u64> = None;
        for r in sim::TruthReader::open(&dir.join(format!("truth/cpu{cpu}.bin"))).unwrap() {
            let (_, addr) = r.unwrap();
            if let Some(site) = prev.and_then(|p| sites.get(&p).map(|s| (p, s))) {
                let c = counts.entry(site.0).or_default();
                if addr == site.0 + site.1.len {
                    c.1 += 1;
                } else if site.1.targets.contains(&addr) {
                    c.0 += 1;
                }
            }
            prev = Some(addr);
        }
    }
    counts
}

/// (taken, not taken) per site in a pre-aggregated file: branches from the
/// site, ranges running over it.
fn counted(path: &Path, sites: &BTreeMap<u64, Site>) -> HashMap<u64, (u64, u64)> {
    let mut counts: HashMap<u64, (u64, u64)> = HashMap::new();
    let Ok(text) = std::fs::read_to_string(path) else { return counts };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(' ').collect();
        let (a, b) = (u64::from_str_radix(f[1], 16).unwrap(), u64::from_str_radix(f[2], 16).unwrap());
        let n: u64 = f[3].parse().unwrap();
        match f[0] {
            "B" if sites.contains_key(&a) => counts.entry(a).or_default().0 += n,
            "F" => {
                for (&s, _) in sites.range(a..b) {
                    counts.entry(s).or_default().1 += n;
                }
            }
            _ => {}
        }
    }
    counts
}

/// `profile DIR --kernel --format bolt --image IMAGE -o OUT`.
fn profile(dir: &Path, image: &str, out: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace"))
        .arg("profile")
        .arg(dir)
        .args(["--kernel", "--format", "bolt", "--image", image, "-o"])
        .arg(out)
        .output()
        .unwrap();
    testkit::success(o, &format!("profile --image {image}"));
}

/// Intel PT.
#[test]
fn jump_label_sites_count_as_the_code_that_ran() {
    sites_count_as_the_code_that_ran(&testkit::scratch!("profile-pokes"), "x86_64");
}

/// CoreSight ETMv4.
#[test]
fn jump_label_sites_count_as_the_code_that_ran_on_arm() {
    sites_count_as_the_code_that_ran(&testkit::scratch!("profile-pokes-arm"), "aarch64");
}

fn sites_count_as_the_code_that_ran(dir: &Path, arch: &str) {
    let run = dir.join("run");
    let args = ["simulate", "--arch", arch, "--cpus", "2", "--pokes", "300", "--instructions", "200000", "--tsc-period", "400", "--seed", "7", "-o"];
    let o = Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).arg(&run).output().unwrap();
    testkit::success(o, "simulate");
    let sites = sites(&run);
    assert!(sites.len() >= 5, "{} jump-label sites", sites.len());
    let truth = truth(&run, 2, &sites);
    // (CoreSight is decoded with perf's model for Intel PT only.)
    let images: &[&str] = if arch == "x86_64" { &["timeline", "static", "perf"] } else { &["timeline", "static"] };
    let files: Vec<(&str, PathBuf)> = images.iter().map(|&i| (i, dir.join(format!("{i}.preagg")))).collect();
    for (image, path) in &files {
        profile(&run, image, path);
    }
    let [ours, stat, perf] = [0, 1, 2].map(|i| files.get(i).map(|f| counted(&f.1, &sites)).unwrap_or_default());
    let mut unsure_path = files[0].1.clone().into_os_string();
    unsure_path.push(".uncertain");
    let unsure = counted(Path::new(&unsure_path), &sites);

    let (mut exact, mut static_wrong, mut flipped) = (0, 0, 0);
    let get = |m: &HashMap<u64, (u64, u64)>, s| m.get(&s).copied().unwrap_or_default();
    eprintln!("{:>18} {:>15} {:>15} {:>15} {:>15} {:>11}", "site", "truth t/nt", "timeline", "static", "perf-style", "uncertain");
    for &s in sites.keys() {
        let (t, o, st, pf, u) = (get(&truth, s), get(&ours, s), get(&stat, s), get(&perf, s), get(&unsure, s));
        eprintln!(
            "{s:>18x} {:>15} {:>15} {:>15} {:>15} {:>11}",
            format!("{}/{}", t.0, t.1),
            format!("{}/{}", o.0, o.1),
            format!("{}/{}", st.0, st.1),
            if files.len() > 2 { format!("{}/{}", pf.0, pf.1) } else { "-".into() },
            u.0 + u.1
        );
        // Every run of the site is counted, certain or apart; an uncertain
        // one may be counted the other way; with nothing uncertain at a
        // site, its counts are exact.
        let slack = u.0 + u.1;
        assert_eq!(o.0 + o.1 + slack, t.0 + t.1, "site {s:#x}: counted {o:?} and uncertain {u:?}, truth {t:?}");
        assert!(o.0.abs_diff(t.0) <= slack && o.1.abs_diff(t.1) <= slack, "site {s:#x}: truth {t:?}, counted {o:?}, uncertain {u:?}");
        exact += usize::from(o == t);
        static_wrong += usize::from(st != t);
        flipped += usize::from(t.0 > 0 && t.1 > 0);
    }
    assert!(flipped >= 3, "{flipped} sites ran both ways");

    // FILE.pokes lists each jump-label site with the profile's counts.
    let mut listed_path = files[0].1.clone().into_os_string();
    listed_path.push(".pokes");
    let listed = std::fs::read_to_string(&listed_path).unwrap();
    let mut labels = 0;
    for line in listed.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(' ').collect();
        let addr = u64::from_str_radix(f[0], 16).unwrap();
        if f[2] == "jump-label" {
            labels += 1;
            let counts: (u64, u64) = (f[4].parse().unwrap(), f[5].parse().unwrap());
            assert_eq!(counts, get(&ours, addr), "{line}");
        }
    }
    assert_eq!(labels, sites.len(), "jump-label sites listed in {}", listed_path.to_string_lossy());
    assert!(exact * 2 >= sites.len(), "{exact} of {} sites counted exactly", sites.len());
    assert!(static_wrong >= flipped, "the static image counts {static_wrong} sites wrongly, {flipped} ran both ways");
}
