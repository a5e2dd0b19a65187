//! `image` and `decode` on perf.data whose MMAP records name files that are
//! not user code: their bytes are never printed; `--symfs` roots the look-ups.

use std::path::Path;
use std::process::{Command, Output};

use perfdata::abi::misc;
use perfdata::Writer;

const SECRET: &[u8] = b"root:$6$secret-hash:19000:0:99999:7:::\n";

/// A perf.data file with one executable MMAP2 of `name` at `addr`.
fn perf_data(path: &Path, name: &str, addr: u64) {
    let mut w = Writer::create(path, testkit::perf::mmap2_attrs()).unwrap();
    w.write(misc::USER, &testkit::perf::exec_mmap2(name, addr, None), &testkit::perf::task7_at(1)).unwrap();
    w.finish().unwrap();
}

fn poketrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poketrace")).args(args).output().unwrap()
}

fn spaced(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

#[test]
fn image_never_prints_a_file_that_is_not_user_code() {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("user-code-cli");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let shadow = d.join("shadow");
    std::fs::write(&shadow, SECRET).unwrap();
    let data = d.join("perf.data");
    perf_data(&data, shadow.to_str().unwrap(), 0x10_0000);
    let out = poketrace(&["image", data.to_str().unwrap(), "--at", "2", "100000", "16"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains(&spaced(&SECRET[..4])) && !stdout.contains("secret"), "{stdout}");
    assert!(stdout.contains("unmapped"), "{stdout}");
    assert!(stderr.contains("1 user code files named by MMAP records were not read") && stderr.contains("shadow: not an ELF file"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn symfs_roots_the_look_up_of_user_files() {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("user-code-symfs");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("root/opt/poketrace-test")).unwrap();
    // A real executable of this host, under the symfs root only.
    let exe = std::env::current_exe().unwrap();
    std::fs::copy(&exe, d.join("root/opt/poketrace-test/prog")).unwrap();
    let head = std::fs::read(&exe).unwrap()[..8].to_vec();
    let data = d.join("perf.data");
    perf_data(&data, "/opt/poketrace-test/prog", 0x10_0000);
    let data = data.to_str().unwrap();
    let symfs = d.join("root");
    let with = poketrace(&["image", data, "--symfs", symfs.to_str().unwrap(), "--at", "2", "100000", "8"]);
    let stdout = String::from_utf8_lossy(&with.stdout);
    assert!(stdout.contains(&spaced(&head)), "the ELF header at the mapping's start: {stdout}");
    let without = poketrace(&["image", data, "--at", "2", "100000", "8"]);
    let stdout = String::from_utf8_lossy(&without.stdout);
    assert!(stdout.contains("unmapped"), "{stdout}");
    let _ = std::fs::remove_dir_all(&d); // the copy of this test's executable
}
