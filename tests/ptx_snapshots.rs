//! Every registered kernel compiles for both targets at its default configuration; the PTX is
//! snapshot-tested (snapshots/ at the workspace root) and assembled by ptxas with zero spills,
//! with the registers of the code emitted before its dead instructions were removed, and (but
//! for at most one in ten) to the same cubin; with source lines (`.file` / `.loc`) it names
//! only the kernels' own files.

use replay_dsl::{compile_with_lines, Specialization, Target};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The ptxas binary: `$REPLAY_PTXAS`, else installed by `scripts/install-ptxas.sh`.
fn ptxas() -> PathBuf {
    replay_runtime::driver::ptxas::repo_ptxas(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap_or_else(|e| panic!("{e}"))
}

/// Assembles `ptx` for `arch`; returns (registers, spill bytes) from `ptxas -v`, and the cubin.
fn assemble(ptxas: &PathBuf, ptx: &str, arch: &str, name: &str) -> (u32, u32, Vec<u8>) {
    // A folder per call, removed after: tests run in parallel, and a file shared by two of
    // them could be truncated by one while ptxas reads it for the other.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("replay-ptxas-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.{arch}.ptx"));
    std::fs::write(&src, ptx).unwrap();
    let out = Command::new(ptxas)
        .args(["-arch", arch, "-v", "-o"])
        .arg(src.with_extension("cubin"))
        .arg(&src)
        .output()
        .expect("run ptxas");
    let cubin = std::fs::read(src.with_extension("cubin")).unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ptxas -arch={arch} rejected {name}:\n{log}");
    let regs = log
        .split("Used ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no register count in ptxas output:\n{log}"));
    let spills = log
        .lines()
        .filter(|l| l.contains("spill stores") || l.contains("spill loads"))
        .flat_map(|l| {
            l.split(',')
                .filter_map(|p| p.split_whitespace().next()?.parse::<u32>().ok())
        })
        .sum();
    (regs, spills, cubin)
}

/// Median time of trace + passes + PTX over 9 runs (printed for the record; the bench
/// `cargo bench -p replay-dsl --bench compile_time` is where compile speed is measured).
fn compile_ms(entry: &replay_dsl::KernelEntry, values: &[(&str, i64)], target: Target) -> f64 {
    let mut times: Vec<f64> = (0..9)
        .map(|_| {
            let start = std::time::Instant::now();
            let kernel = (entry.trace)(values, &Specialization::default()).expect("traced once already");
            compile_with_lines(&kernel, target, false).expect("compiled once already");
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

#[test]
fn every_kernel_compiles_snapshots_and_assembles() {
    let ptxas = ptxas();
    let mut report = Vec::new();
    // Kernels whose cubin is byte-identical with and without the dead instructions (ptxas
    // removes them too; its heuristics may still see the shorter text differently).
    let (mut same_cubin, mut assembled) = (0, 0);
    for entry in replay_kernels::registry() {
        let defaults = (entry.defaults)();
        let kernel = (entry.trace)(&defaults, &Specialization::default())
            .unwrap_or_else(|e| panic!("{} failed to trace: {e}", entry.name));
        for target in Target::ALL {
            let compiled = compile_with_lines(&kernel, target, false)
                .unwrap_or_else(|e| panic!("{} on {target}: {e}", entry.name));
            insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
                insta::assert_snapshot!(format!("{}.{}", entry.name, target.arch()), compiled.ptx);
            });
            let (regs, spills, cubin) = assemble(&ptxas, &compiled.ptx, target.arch(), entry.name);
            assert_eq!(spills, 0, "{} spills on {target}", entry.name);
            let emitted = compiled.stage("emitted").expect("the code as emitted is a stage");
            assert!(
                emitted.len() >= compiled.ptx.len(),
                "{}: pruning added code",
                entry.name
            );
            let (unpruned_regs, _, unpruned) = assemble(&ptxas, emitted, target.arch(), entry.name);
            assert_eq!(
                regs, unpruned_regs,
                "{} on {target}: the registers differ without the dead instructions",
                entry.name
            );
            same_cubin += usize::from(cubin == unpruned);
            assembled += 1;
            report.push(format!(
                "{:<22} {:<8} {:>4} registers, 0 spill bytes, compile {:.3} ms",
                entry.name,
                target.arch(),
                regs,
                compile_ms(&entry, &defaults, target)
            ));
        }
    }
    println!("{}", report.join("\n"));
    println!("{same_cubin} of {assembled} cubins identical without the dead instructions");
    assert!(
        same_cubin * 10 >= assembled * 9,
        "only {same_cubin} of {assembled} cubins are identical without the dead instructions"
    );
}

#[test]
fn every_kernel_carries_its_own_source_lines() {
    let ptxas = ptxas();
    for entry in replay_kernels::registry() {
        let kernel = (entry.trace)(&(entry.defaults)(), &Specialization::default())
            .unwrap_or_else(|e| panic!("{} failed to trace: {e}", entry.name));
        let compiled = compile_with_lines(&kernel, Target::Sm90, true).expect("compiles");
        let files: Vec<&str> = compiled.ptx.lines().filter(|l| l.starts_with(".file ")).collect();
        assert!(!files.is_empty(), "{}: no .file", entry.name);
        for f in &files {
            // The kernels' sources (the gallery's and the SSM's), never the front end's.
            assert!(f.contains("kernels-src/src/"), "{}: {f}", entry.name);
        }
        let locs = compiled.ptx.lines().filter(|l| l.trim().starts_with(".loc ")).count();
        assert!(locs > 0, "{}: no .loc", entry.name);
        let (_, spills, _) = assemble(&ptxas, &compiled.ptx, "sm_90a", entry.name);
        assert_eq!(spills, 0, "{} spills with source lines", entry.name);
    }
}
