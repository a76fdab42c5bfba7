//! Every reviewed PTX snapshot (`snapshots/*.snap`) parses: the emulator knows every
//! instruction the backend emits for the gallery and SSM kernels, on both targets.

use replay_ptx_emu::Module;
use std::path::PathBuf;

#[test]
fn every_snapshot_parses() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../snapshots");
    let mut parsed = 0;
    let mut failures = vec![];
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        // The PTX follows insta's header; CLI snapshots that hold no module are skipped.
        let Some(start) = text.find(".version") else { continue };
        match Module::parse(&text[start..]) {
            Ok(m) => {
                assert!(m.entries().count() > 0, "{}", path.display());
                parsed += 1;
            }
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(parsed >= 20, "only {parsed} snapshots with PTX");
}
