//! `replay decode` and `replay bench-ssm` without a GPU: the decode loop on the CPU
//! interpreter at the reduced shape, checked against the float64 recurrence, the traffic
//! model, and the benchmark's table, JSON and plot at the reduced shape.

mod cli_support;
use cli_support::{has_driver, ok};

#[test]
fn decode_without_a_gpu_says_so_checks_and_prints_the_traffic_model() {
    if has_driver() {
        return;
    }
    let out = ok(&["decode"]);
    assert!(out.starts_with("no GPU: no CUDA driver"), "{out}");
    assert!(out.contains("No GPU was found"), "{out}");
    assert_eq!(out.matches("— pass").count(), 2, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        out.contains("traffic model of one nemotron3-super-120b layer at batch 256"),
        "{out}"
    );
    assert!(out.contains("L* = sqrt(2 ā (M_S/r − T)) = 21.0"), "{out}");
    let nano = ok(&["decode", "--model", "nemotron3-nano-4b", "--batch", "64"]);
    assert!(nano.contains("nemotron3-nano-4b layer at batch 64"), "{nano}");
}

#[test]
fn decode_rejects_a_gdn_model() {
    let out = cli_support::replay(&["decode", "--model", "qwen3.5-4b"]);
    assert!(!out.status.success());
}

#[test]
fn bench_ssm_interpret_writes_json_and_plot() {
    let dir = std::env::temp_dir().join(format!("replay-ssm-bench-{}", std::process::id()));
    let json = dir.join("ssm.json");
    let out = ok(&[
        "bench-ssm",
        "--interpret",
        "--batch",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.contains("cpu-test"), "{out}");
    assert!(out.contains("targets:"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["batch"], 2);
    assert!(row["replay_ms"].as_f64().unwrap() > 0.0);
    assert!(row["verify"][0]["snapshot_ms"].as_f64().unwrap() > 0.0);
    assert!(json.with_extension("png").exists());
    let _ = std::fs::remove_dir_all(dir);
}
