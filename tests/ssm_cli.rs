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

/// `bench-ssm` on the interpreter at batch 2, then `extra`.
fn bench_small<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["bench-ssm", "--interpret", "--batch", "2"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn bench_ssm_interpret_writes_json_and_plot() {
    let dir = std::env::temp_dir().join(format!("replay-ssm-bench-{}", std::process::id()));
    let json = dir.join("ssm.json");
    let out = ok(&bench_small(&["--json", json.to_str().unwrap()]));
    assert!(out.contains("cpu-test"), "{out}");
    assert!(out.contains("targets:"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["batch"], 2);
    assert!(row["replay_ms"].as_f64().unwrap() > 0.0);
    assert!(row["verify"][0]["snapshot_ms"].as_f64().unwrap() > 0.0);
    // Two state precisions, timed beside: the window and the verification cycle.
    assert!(row["replay_lp_ms"].as_f64().unwrap() > 0.0);
    assert!(row["speedup_lp"].as_f64().unwrap() > 0.0);
    assert!(row["verify"][0]["replay_lp_ms"].as_f64().unwrap() > 0.0);
    assert!(out.contains("f16 ckpt"), "{out}");
    // Each cycle's launches timed apart: positive parts that add up to about the cycle (the
    // interpreter's host timings: within a factor of two of the graph-less cycle).
    for (parts, cycle) in [("parts", "replay_ms"), ("parts_lp", "replay_lp_ms")] {
        let v = &row["verify"][0];
        let p = [&v[parts]["verify_ms"], &v[parts]["fold_ms"], &v[parts]["commit_ms"]].map(|x| x.as_f64().unwrap());
        assert!(p.iter().all(|t| *t > 0.0), "{v}");
        let (sum, cycle) = (p.iter().sum::<f64>(), v[cycle].as_f64().unwrap());
        assert!(sum > cycle / 2.0 && sum < cycle * 2.0, "{v}");
    }
    assert!(out.contains("where a verification cycle goes"), "{out}");
    assert!(json.with_extension("png").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bench_ssm_reuses_the_plans_of_an_earlier_run() {
    let dir = std::env::temp_dir().join(format!("replay-ssm-plans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first, second) = (dir.join("first.json"), dir.join("second.json"));
    let run = |extra: &[&str], json: &std::path::Path| {
        let mut args = vec!["--json", json.to_str().unwrap()];
        args.extend_from_slice(extra);
        ok(&bench_small(&args))
    };
    run(&[], &first);
    // A window the default plan would not pick, so that the second run can only have it from
    // the file.
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&first).unwrap()).unwrap();
    let window = v["rows"][0]["plans"]["replay"]["window"].as_u64().unwrap() + 1;
    v["rows"][0]["plans"]["replay"]["window"] = window.into();
    // And a plan of its own for two state precisions (untuned runs write none).
    assert!(v["rows"][0]["plans"].get("replay_two").is_none());
    let mut two = v["rows"][0]["plans"]["replay"].clone();
    two["window"] = (window + 1).into();
    two["lp"] = true.into();
    v["rows"][0]["plans"]["replay_two"] = two;
    std::fs::write(&first, v.to_string()).unwrap();

    let out = run(&["--plans", first.to_str().unwrap()], &second);
    assert!(out.contains("cpu-test"), "{out}");
    let w: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&second).unwrap()).unwrap();
    let row = &w["rows"][0];
    assert_eq!(row["plans"]["replay"]["window"].as_u64(), Some(window), "{row}");
    assert_eq!(row["plans"]["replay_two"]["window"].as_u64(), Some(window + 1), "{row}");
    assert_eq!(row["plans"]["replay_two"]["lp"].as_bool(), Some(true), "{row}");
    let choices = row["plans"]["choices"].as_array().unwrap();
    assert!(
        !choices.is_empty() && choices.iter().all(|c| c["source"] == "file"),
        "{row}"
    );
    assert!(row["replay_ms"].as_f64().unwrap() > 0.0);

    // Without --batch, just the file's batch (2; the interpreter's default batches are 1 and 4).
    let third = dir.join("third.json");
    ok(&[
        "bench-ssm",
        "--interpret",
        "--plans",
        first.to_str().unwrap(),
        "--json",
        third.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&third).unwrap()).unwrap();
    let batches: Vec<_> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["batch"].clone())
        .collect();
    assert_eq!(batches, [2], "{v}");

    // More drafts than the file's speculative plan holds: a clear error, nothing run.
    let bad = cli_support::replay(&bench_small(&["--drafts", "64", "--plans", first.to_str().unwrap()]));
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("verify at most") && err.contains("64 asked"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
