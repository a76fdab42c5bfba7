//! Kernels compiled to cubins by ptxas processes (`REPLAY_JIT`'s default where a ptxas is
//! found), and the driver's JIT they fall back to. The compilation runs
//! everywhere (ptxas: `$REPLAY_PTXAS`, else installed by `scripts/install-ptxas.sh`; on a GPU
//! machine without network, point `REPLAY_PTXAS` at the toolkit's); loading and launching the
//! cubins needs a GPU (skipped without one, saying so).

mod common;

use common::{Add, AddConfig};
use replay_dsl::{compile, KernelDef, Specialization, Target};
use replay_runtime::driver::ptxas::{cached_cubin, compile_cubin, repo_ptxas, Jit};
use replay_runtime::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The ptxas binary: `$REPLAY_PTXAS`, else what `scripts/install-ptxas.sh` installs.
fn ptxas() -> &'static PathBuf {
    static PTXAS: OnceLock<PathBuf> = OnceLock::new();
    PTXAS
        .get_or_init(|| repo_ptxas(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap_or_else(|e| panic!("{e}")))
}

/// The PTX of `add` at `config` for `target`.
fn add_ptx(config: &AddConfig, target: Target) -> String {
    let ir = Add::trace(config, &Specialization::default()).unwrap();
    compile(&ir, target).unwrap().ptx
}

#[test]
fn ptx_compiles_to_a_cubin_for_both_targets() {
    for target in [Target::Sm90, Target::Sm100] {
        for line_info in [false, true] {
            let cubin = compile_cubin(
                ptxas(),
                &add_ptx(&AddConfig::default(), target),
                target.arch(),
                line_info,
            )
            .unwrap_or_else(|e| panic!("{target:?}: {e}"));
            assert_eq!(&cubin[..4], b"\x7fELF", "{target:?}: not an ELF image");
        }
    }
}

#[test]
fn a_ptxas_failure_carries_its_message() {
    let ptx = add_ptx(&AddConfig::default(), Target::Sm90);
    let body = ptx
        .find(".entry")
        .and_then(|e| ptx[e..].find('{').map(|b| e + b + 1))
        .expect("an entry body");
    let broken = format!("{}\n\tbogus.op.f32 %f1, %f1;{}", &ptx[..body], &ptx[body..]);
    let err = match compile_cubin(ptxas(), &broken, "sm_90a", false) {
        Ok(cubin) => panic!("broken PTX compiled ({} bytes)", cubin.len()),
        Err(e) => e,
    };
    assert!(err.contains("failed") && err.contains("bogus"), "{err}");
}

#[test]
fn compilations_on_several_threads_do_not_share_files() {
    let configs: Vec<AddConfig> = [32i64, 64, 128, 256, 512, 1024]
        .into_iter()
        .flat_map(|block| {
            [1i64, 4].map(|num_warps| AddConfig {
                block,
                bug: 0,
                num_warps,
            })
        })
        .collect();
    let ptx: Vec<String> = configs.iter().map(|c| add_ptx(c, Target::Sm90)).collect();
    let alone: Vec<Vec<u8>> = ptx
        .iter()
        .map(|p| compile_cubin(ptxas(), p, "sm_90a", false).unwrap())
        .collect();
    let together: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = ptx
            .iter()
            .map(|p| s.spawn(move || compile_cubin(ptxas(), p, "sm_90a", false).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(alone, together, "each thread's cubin is its own PTX's");
}

#[test]
fn cubins_are_cached_and_a_damaged_one_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cubin");
    let ptx = add_ptx(&AddConfig::default(), Target::Sm90);
    let files = || -> Vec<PathBuf> {
        let mut f: Vec<PathBuf> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
        f.sort();
        f
    };
    let first = cached_cubin(ptxas(), &ptx, "sm_90a", false, Some(&cache)).unwrap();
    assert_eq!(first, compile_cubin(ptxas(), &ptx, "sm_90a", false).unwrap());
    let stored = files();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(std::fs::read(&stored[0]).unwrap(), first);
    // A hit returns the stored bytes: a marker appended to the file comes back.
    let mut marked = first.clone();
    marked.extend_from_slice(b"cached");
    std::fs::write(&stored[0], &marked).unwrap();
    assert_eq!(
        cached_cubin(ptxas(), &ptx, "sm_90a", false, Some(&cache)).unwrap(),
        marked
    );
    // Another target's PTX, line tables or another configuration: entries of their own.
    let ptx_100 = add_ptx(&AddConfig::default(), Target::Sm100);
    cached_cubin(ptxas(), &ptx_100, "sm_100a", false, Some(&cache)).unwrap();
    cached_cubin(ptxas(), &ptx, "sm_90a", true, Some(&cache)).unwrap();
    let other = add_ptx(
        &AddConfig {
            block: 128,
            ..AddConfig::default()
        },
        Target::Sm90,
    );
    cached_cubin(ptxas(), &other, "sm_90a", false, Some(&cache)).unwrap();
    assert_eq!(files().len(), 4);
    // A damaged entry (not an ELF image) is compiled again and replaced.
    std::fs::write(&stored[0], b"not a cubin").unwrap();
    assert_eq!(
        cached_cubin(ptxas(), &ptx, "sm_90a", false, Some(&cache)).unwrap(),
        first
    );
    assert_eq!(std::fs::read(&stored[0]).unwrap(), first);
    // A cache folder that cannot be created costs only the caching.
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, b"").unwrap();
    let uncached = cached_cubin(ptxas(), &ptx, "sm_90a", false, Some(&blocked.join("cubin"))).unwrap();
    assert_eq!(uncached, first);
}

/// Fresh pseudo-random values in [-1, 1) (xorshift, seeded from the clock).
fn random(n: usize) -> Vec<f32> {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// Loads `add` at several configurations on several threads at once on a GPU compiling with
/// `jit`, launches each and checks every element against float64; `false` without a GPU.
fn add_runs_correctly(jit: Jit) -> Result<bool, RuntimeError> {
    let d = match Device::cuda_with(0, jit.clone()) {
        Ok(d) => d,
        Err(RuntimeError::NoDriver { .. }) | Err(RuntimeError::NoDevice { .. }) => return Ok(false),
        Err(e) => panic!("opening the GPU failed: {e}"),
    };
    assert_eq!(d.jit(), Some(&jit));
    let s = d.new_stream().unwrap();
    let n = 100_003usize;
    let (xs, ys) = (random(n), random(n));
    let x = DeviceBuffer::from_host(&s, &xs).unwrap();
    let y = DeviceBuffer::from_host(&s, &ys).unwrap();
    let configs: Vec<AddConfig> = [64i64, 128, 256, 1024]
        .map(|block| AddConfig {
            block,
            bug: 0,
            num_warps: 4,
        })
        .into();
    let loaded: Vec<_> = std::thread::scope(|sc| {
        let loads: Vec<_> = configs
            .iter()
            .map(|c| {
                let d = &d;
                sc.spawn(move || d.load::<Add>(c, &Specialization::default()).map(|_| ()))
            })
            .collect();
        loads.into_iter().map(|l| l.join().unwrap()).collect()
    });
    loaded.into_iter().collect::<Result<Vec<()>, _>>()?;
    for c in configs {
        let block = c.block as u64;
        let k = CompiledKernel::<Add>::lazy(&d, c);
        let mut out = DeviceBuffer::from_host(&s, &vec![f32::NAN; n]).unwrap();
        k.launch(&s, Grid::cdiv(n as u64, block), (&x, &y, &mut out, n as i32))?;
        let got = out.to_host(&s).unwrap();
        for i in 0..n {
            let want = xs[i] as f64 + ys[i] as f64;
            let err = (got[i] as f64 - want).abs();
            assert!(
                err <= 1e-6 * want.abs().max(1.0),
                "{jit:?}, block {block}, element {i}: {} vs {want}",
                got[i]
            );
        }
    }
    Ok(true)
}

#[test]
fn kernels_load_and_run_from_ptxas_cubins_and_the_drivers_jit_on_a_gpu() {
    for jit in [
        Jit::Ptxas(ptxas().clone()),
        Jit::PtxasOrDriver(ptxas().clone()),
        Jit::Driver,
    ] {
        if !add_runs_correctly(jit.clone()).unwrap_or_else(|e| panic!("{jit:?}: {e}")) {
            eprintln!("skipped: no CUDA GPU");
            return;
        }
    }
}

#[test]
fn a_failing_ptxas_falls_back_to_the_drivers_jit_unless_ptxas_was_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("ptxas");
    std::fs::write(
        &broken,
        "#!/bin/sh\necho 'ptxas fatal: this ptxas is broken' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    match add_runs_correctly(Jit::PtxasOrDriver(broken.clone())) {
        Ok(false) => return eprintln!("skipped: no CUDA GPU"),
        Ok(true) => {}
        Err(e) => panic!("no fallback to the driver's JIT: {e}"),
    }
    let d = Device::cuda_with(0, Jit::PtxasOrDriver(broken.clone())).unwrap();
    assert!(d.summary().contains(&broken.display().to_string()), "{}", d.summary());
    d.load::<Add>(&AddConfig::default(), &Specialization::default())
        .unwrap();
    assert!(d.summary().contains("driver's JIT after"), "{}", d.summary());
    match add_runs_correctly(Jit::Ptxas(broken)) {
        Ok(ran) => panic!("a broken ptxas loaded kernels (ran: {ran})"),
        Err(e) => assert!(e.to_string().contains("this ptxas is broken"), "{e}"),
    }
}
