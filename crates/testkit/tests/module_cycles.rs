//! No workspace crate has an import cycle between its modules (see `testkit::modules`).

use std::path::Path;

#[test]
fn no_module_cycles() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("crates/ entry").path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let files = testkit::modules::read_sources(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        checked += files.len();
        let name = dir.file_name().expect("crate dir").to_string_lossy().into_owned();
        found.extend(testkit::modules::cycles(&files).into_iter().map(|c| format!("{name}: {c}")));
    }
    assert!(checked > 50, "only {checked} source files under {}", crates.display());
    found.sort();
    assert!(found.is_empty(), "{} import cycles between modules:\n{}", found.len(), found.concat());
}
