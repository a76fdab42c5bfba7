//! `replay kernels` and `replay ptx`: snapshots of their output and their errors.

mod cli_support;
use cli_support::{fails, ok};

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

#[test]
fn kernels_listing() {
    let out = ok(&["kernels"]);
    assert!(out.contains("vector_add\n  params:     x: *f32, y: *f32, out: *f32, n: i32"));
    // Every registered kernel is listed, with its parameters and constexprs.
    let blocks: Vec<&str> = out.split_inclusive("constexprs:").collect();
    for k in replay_kernels::registry() {
        assert!(out.lines().any(|l| l == k.name), "{} missing:\n{out}", k.name);
    }
    assert!(blocks.len() > replay_kernels::registry().len());
    // The snapshot covers the gallery (kernels added to the registry later do not churn it).
    let gallery: Vec<&str> = replay::gallery::all().iter().map(|k| k.name).collect();
    let mut kept = String::new();
    let mut keep = false;
    for line in out.lines() {
        if !line.starts_with(' ') {
            keep = gallery.contains(&line);
        }
        if keep {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    snap!("cli_kernels", kept);
}

#[test]
fn ptx_vector_add_sm90() {
    let out = ok(&["ptx", "vector_add", "--target", "sm_90"]);
    assert!(out.contains(".target sm_90a"), "{out}");
    assert!(out.contains(".entry vector_add"), "{out}");
    snap!("cli_ptx_vector_add_sm_90", out);
}

#[test]
fn ptx_vector_add_sm100() {
    let out = ok(&["ptx", "vector_add", "--target", "sm_100"]);
    assert!(out.contains(".target sm_100a"), "{out}");
    snap!("cli_ptx_vector_add_sm_100", out);
}

#[test]
fn stages_and_ir() {
    let stages = ok(&["ptx", "vector_add", "--stages"]);
    let names: Vec<&str> = stages.lines().collect();
    assert_eq!(names.first(), Some(&"trace"));
    assert_eq!(names.last(), Some(&"ptx"));
    snap!("cli_ptx_vector_add_stages", stages.clone());
    // Every listed stage prints; `ptx` is the PTX itself.
    for name in &names {
        let text = ok(&["ptx", "vector_add", "--stage", name]);
        assert!(!text.trim().is_empty(), "stage {name} is empty");
    }
    assert_eq!(ok(&["ptx", "vector_add", "--stage", "ptx"]), ok(&["ptx", "vector_add"]));
    // `--ir` is the IR after the last pass: the stage before the backend's.
    let ir = ok(&["ptx", "vector_add", "--ir"]);
    assert!(!ir.contains(".entry"), "{ir}");
    let last_pass = names
        .iter()
        .take_while(|n| **n != "layout" && **n != "ptx")
        .last()
        .unwrap();
    assert_eq!(ir, ok(&["ptx", "vector_add", "--stage", last_pass]));
}

#[test]
fn resources_of_a_launch() {
    let out = ok(&["ptx", "vector_add", "--resources", "--set", "num_warps=2"]);
    assert!(out.contains("threads: 64 (2 warps)"), "{out}");
    assert!(out.contains("occupancy hint: none"), "{out}");
    assert!(out.contains("shared memory: 0 bytes (static)"), "{out}");
    // A verification tile past the static limit: its staging buffers launch as dynamic memory,
    // and its occupancy hint is named.
    let verify = ok(&[
        "ptx",
        "mamba2_verify",
        "--resources",
        "--set",
        "ASYNC=1",
        "--set",
        "BV=64",
        "--set",
        "min_blocks=2",
    ]);
    assert!(verify.contains("entry: mamba2_verify_"), "{verify}");
    assert!(verify.contains("occupancy hint: 2 programs per SM"), "{verify}");
    let bytes: u32 = verify
        .lines()
        .find_map(|l| l.strip_prefix("shared memory: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no shared memory line: {verify}"));
    // Two stages of 64 f32 rows of DK = 128, at least.
    assert!(bytes >= 2 * 64 * 128 * 4, "{verify}");
    assert!(verify.contains("(dynamic)"), "{verify}");
    let e = fails(&["ptx", "vector_add", "--resources", "--stages"]);
    assert!(e.contains("cannot be used with"), "{e}");
}

#[test]
fn set_overrides_constexprs() {
    let small = ok(&["ptx", "vector_add", "--set", "BLOCK=256", "--set", "num_warps=2"]);
    assert!(small.contains("vector_add_BLOCK256_w2"), "{small}");
    assert_ne!(small, ok(&["ptx", "vector_add"]));
    let ir = ok(&["ptx", "softmax", "--set", "BLOCK=64", "--stage", "trace"]);
    assert!(ir.contains("64"), "{ir}");
}

#[test]
fn unknown_names_are_clear_errors() {
    let e = fails(&["ptx", "no_such_kernel"]);
    assert!(e.contains("unknown kernel `no_such_kernel`"), "{e}");
    assert!(e.contains("vector_add"), "{e}");
    let e = fails(&["ptx", "vector_add", "--set", "BLOK=64"]);
    assert!(e.contains("no constexpr `BLOK`"), "{e}");
    assert!(e.contains("BLOCK"), "{e}");
    let e = fails(&["ptx", "vector_add", "--set", "BLOCK"]);
    assert!(e.contains("NAME=VALUE"), "{e}");
    let e = fails(&["ptx", "vector_add", "--set", "BLOCK=big"]);
    assert!(e.contains("not an integer"), "{e}");
    let e = fails(&["ptx", "vector_add", "--stage", "nope"]);
    assert!(e.contains("no stage `nope`") && e.contains("trace"), "{e}");
    let e = fails(&["ptx", "vector_add", "--target", "sm_80"]);
    assert!(e.contains("unknown target `sm_80`"), "{e}");
    // A constexpr value the kernel rejects is a compile error naming the kernel.
    let e = fails(&["ptx", "vector_add", "--set", "BLOCK=1000"]);
    assert!(e.contains("vector_add"), "{e}");
    let e = fails(&["tune", "no_such_kernel"]);
    assert!(e.contains("unknown kernel"), "{e}");
}
