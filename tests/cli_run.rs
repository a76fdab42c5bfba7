//! `replay devices`, `check`, `bench` and `tune` on a machine without a GPU (the CPU
//! interpreter at small sizes), and the harness catching broken kernels.

mod cli_support;
use cli_support::{has_driver, ok, replay, replay_env, stdout};

use replay::devices::Choice;
use replay::gallery::{self, Case, Scale};
use replay::harness::{run_and_judge, Loaded};
use replay_runtime::Device;

#[test]
fn devices_without_a_driver() {
    if has_driver() {
        return;
    }
    let out = ok(&["devices"]);
    assert!(out.starts_with("no GPU: no CUDA driver"), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn check_interpret_passes() {
    let out = ok(&["check", "--interpret"]);
    assert!(out.contains("--interpret: running on the CPU interpreter"), "{out}");
    assert!(out.contains("all "), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    for k in gallery::all() {
        assert!(out.contains(k.name), "{} missing:\n{out}", k.name);
    }
}

#[test]
fn check_without_a_gpu_says_so_and_passes() {
    if has_driver() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("replay-cli-check-{}", std::process::id()));
    let json = dir.join("check.json");
    let out = ok(&[
        "check",
        "--filter",
        "softmax",
        "--seed",
        "0x1234",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.starts_with("no GPU: no CUDA driver"), "{out}");
    assert!(out.contains("seed 0x1234"), "{out}");
    assert!(!out.contains("vector_add"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["backend"], "interpreter");
    assert!(v["rows"].as_array().unwrap().len() >= 3);
    assert!(v["rows"][0]["verdict"]["pass"].as_bool().unwrap());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bench_without_a_gpu_says_so_and_writes_json() {
    if has_driver() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("replay-cli-bench-{}", std::process::id()));
    let json = dir.join("bench.json");
    let out = ok(&["bench", "--filter", "ma", "--json", json.to_str().unwrap()]);
    assert!(out.starts_with("no GPU: no CUDA driver"), "{out}");
    assert!(out.contains("copy bandwidth"), "{out}");
    for k in ["softmax", "matmul", "global_max"] {
        assert!(out.contains(k), "{k}:\n{out}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["device"]["backend"], "interpreter");
    assert!(v["copy"]["gbps"].as_f64().unwrap() > 0.0);
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 3);
    for k in kernels {
        assert!(k["error"].is_null(), "{k}");
        assert!(k["verdict"]["pass"].as_bool().unwrap(), "{k}");
        assert!(k["median_ms"].as_f64().unwrap() > 0.0, "{k}");
        assert!(k["compile"]["total_ms"].as_f64().unwrap() > 0.0, "{k}");
        assert!(k["launch"]["plain_us"].as_f64().unwrap() > 0.0, "{k}");
        assert!(k["launch"]["graph_us"].is_null(), "{k}");
    }
    let mm = kernels.iter().find(|k| k["kernel"] == "matmul").unwrap();
    assert!(mm["gflops"].as_f64().unwrap() > 0.0);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tune_twice_hits_the_cache() {
    let dir = std::env::temp_dir().join(format!("replay-cli-tune-{}", std::process::id()));
    let env = [("XDG_CACHE_HOME", dir.to_str().unwrap())];
    let first = replay_env(&["tune", "global_max", "--interpret"], &env);
    assert!(first.status.success(), "{}", stdout(&first));
    let out = stdout(&first);
    assert!(out.contains("tuned in"), "{out}");
    assert!(out.contains("ok (best)"), "{out}");
    // 5 BLOCKs × 3 warp counts.
    assert!(out.matches("BLOCK=").count() >= 15, "{out}");
    let second = stdout(&replay_env(&["tune", "global_max", "--interpret"], &env));
    assert!(second.contains("cache hit in"), "{second}");
    assert!(second.contains("ok (best)"), "{second}");
    let forced = stdout(&replay_env(&["tune", "global_max", "--interpret", "--force"], &env));
    assert!(forced.contains("tuned in"), "{forced}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_filter_is_an_error() {
    let o = replay(&["check", "--interpret", "--filter", "no_such"]);
    assert!(!o.status.success());
}

fn interpreter() -> Choice {
    Choice {
        device: Device::interpreter(),
        scale: Scale::Small,
        note: Some("test".into()),
    }
}

#[test]
fn the_harness_catches_unwritten_and_out_of_bounds_outputs() {
    use rand::SeedableRng;
    let choice = interpreter();
    let stream = choice.device.new_stream().unwrap();
    let run = |name: &str, case: Case| {
        let k = gallery::find(name).unwrap();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let inst = (k.build)(&case, &mut rng, true);
        let checks = (k.expect)(&case, &inst, false);
        let kernel = (k.compile)(&choice.device, &case.config).unwrap();
        let loaded = Loaded::new(&stream, &inst).unwrap();
        run_and_judge(kernel.as_ref(), &stream, &inst, &loaded, &checks).unwrap()
    };
    // BLOCK smaller than the row: columns past BLOCK are never written.
    let v = run(
        "softmax",
        Case::new(
            &[("BLOCK", 64), ("num_warps", 1)],
            &[("rows", 3), ("cols", 100), ("stride", 128)],
        ),
    );
    assert!(!v.pass);
    assert_eq!(v.unwritten, 3 * 36);
    // The same with a block that covers the row passes.
    let v = run(
        "softmax",
        Case::new(
            &[("BLOCK", 128), ("num_warps", 1)],
            &[("rows", 3), ("cols", 100), ("stride", 128)],
        ),
    );
    assert!(v.pass, "{v:?}");
    // A histogram launched over too few programs misses counts.
    let k = gallery::find("histogram").unwrap();
    let case = Case::new(&[("BLOCK", 128), ("BINS", 16), ("num_warps", 4)], &[("n", 1000)]);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    let mut inst = (k.build)(&case, &mut rng, true);
    let checks = (k.expect)(&case, &inst, false);
    inst.grid = replay_runtime::Grid::from(2);
    let kernel = (k.compile)(&choice.device, &case.config).unwrap();
    let loaded = Loaded::new(&stream, &inst).unwrap();
    let v = run_and_judge(kernel.as_ref(), &stream, &inst, &loaded, &checks).unwrap();
    assert!(!v.pass && v.bad > 0, "{v:?}");
}

#[test]
fn check_report_fails_on_a_mismatch() {
    let report = replay::check::run_checks(&interpreter(), Some("vector_add"), 42);
    assert_eq!(report.failures(), 0);
    assert!(report.rows.len() >= 3);
    let table = report.table().to_string();
    assert!(table.contains("n=1 "), "{table}");
}
