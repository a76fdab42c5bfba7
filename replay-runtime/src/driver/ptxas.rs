//! Who turns a kernel's PTX into machine code on a GPU (`REPLAY_JIT`): ptxas processes when
//! a ptxas is found, else the driver's JIT. The driver compiles one module at a time per
//! process (an H200, driver 13.0: 24 modules of the verification kernel took 10.5–12 s on 1, 4
//! or 16 threads alike), so a tuning that compiles hundreds of candidates waits on it (Nano's
//! verification tiles at B=1: 33 s with ptxas, more than 200 s with the driver); ptxas
//! processes run in parallel (the tuner preloads its candidates on several threads), and the
//! driver then only loads their cubins, which are cached on disk like the driver's own JIT
//! results.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a CUDA device compiles the PTX it loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Jit {
    /// The driver's JIT (`cuModuleLoadData` of the PTX).
    Driver,
    /// A ptxas process per module (this binary), then `cuModuleLoadData` of the cubin; a
    /// module ptxas fails on is an error.
    Ptxas(PathBuf),
    /// The default where a ptxas is found: as [`Jit::Ptxas`] until ptxas fails on a module or
    /// the driver refuses its cubin (a ptxas too old for the PTX, or too new for the driver),
    /// then, after one warning on stderr, the driver's JIT for that module and every later one.
    PtxasOrDriver(PathBuf),
}

impl Jit {
    /// The mode `REPLAY_JIT` asks for, looking up the environment with `var`: `driver`,
    /// `ptxas`, or `auto` (the default, when unset or empty): [`Jit::PtxasOrDriver`] with
    /// [`find_ptxas`]'s binary, [`Jit::Driver`] when there is none. Errors: an unknown value,
    /// `ptxas` with none found, or a `REPLAY_PTXAS` that is no file (unless `driver`).
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> Result<Jit, String> {
        let value = var("REPLAY_JIT").map(|v| v.to_string_lossy().trim().to_ascii_lowercase());
        let named = var("REPLAY_PTXAS").filter(|p| !p.is_empty()).map(PathBuf::from);
        let missing = named.filter(|p| !p.is_file()).map(|p| {
            format!(
                "REPLAY_PTXAS={}: no such file (unset it to look for ptxas elsewhere)",
                p.display()
            )
        });
        match value.as_deref() {
            Some("driver") => Ok(Jit::Driver),
            _ if missing.is_some() => Err(missing.unwrap_or_default()),
            None | Some("") | Some("auto") => Ok(find_ptxas(&var).map_or(Jit::Driver, Jit::PtxasOrDriver)),
            Some("ptxas") => find_ptxas(&var).map(Jit::Ptxas).ok_or_else(|| {
                "REPLAY_JIT=ptxas, but no ptxas was found: set REPLAY_PTXAS to its path, or put it on \
                 PATH or in $CUDA_HOME/bin"
                    .to_string()
            }),
            Some(other) => Err(format!("REPLAY_JIT={other}: expected `auto`, `driver` or `ptxas`")),
        }
    }

    /// The ptxas that compiles this device's modules, if any.
    pub fn ptxas(&self) -> Option<&Path> {
        match self {
            Jit::Driver => None,
            Jit::Ptxas(path) | Jit::PtxasOrDriver(path) => Some(path),
        }
    }
}

/// The ptxas binary: `$REPLAY_PTXAS`, else `ptxas` on `$PATH`, else in `$CUDA_HOME/bin`,
/// `$CUDA_PATH/bin` or `/usr/local/cuda/bin` (the first that is a file), with the
/// environment looked up with `var`.
pub fn find_ptxas(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(p) = set("REPLAY_PTXAS") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let on_path = set("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("ptxas")).collect::<Vec<_>>())
        .unwrap_or_default();
    let homes = ["CUDA_HOME", "CUDA_PATH"]
        .into_iter()
        .filter_map(|name| set(name).map(|h| PathBuf::from(h).join("bin/ptxas")));
    on_path
        .into_iter()
        .chain(homes)
        .chain([PathBuf::from("/usr/local/cuda/bin/ptxas")])
        .find(|p| p.is_file())
}

/// The ptxas this repository's tests use: `$REPLAY_PTXAS`, else the one
/// `scripts/install-ptxas.sh` (under `repo`) installs — the pinned version whose register and
/// spill counts the snapshot tests check.
pub fn repo_ptxas(repo: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("REPLAY_PTXAS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let script = repo.join("scripts/install-ptxas.sh");
    let out = run(Command::new("bash").arg(&script), &script)?;
    let path = String::from_utf8_lossy(&out.stdout);
    let last = path.lines().last().map(str::trim).filter(|l| !l.is_empty());
    last.map(PathBuf::from)
        .ok_or_else(|| format!("{} printed no path", script.display()))
}

/// [`compile_cubin`] through a cache of cubins in `dir` (none: no cache), keyed by the hash
/// of the PTX, `arch`, `line_info` and the ptxas binary (its path, size and modification
/// time): a process that loads the same kernels again skips ptxas, as the driver's own cache
/// does for its JIT. A cached file that is not an ELF image is reported on stderr and
/// rebuilt; a cache that cannot be written only costs the next process a compilation.
pub fn cached_cubin(
    ptxas: &Path,
    ptx: &str,
    arch: &str,
    line_info: bool,
    dir: Option<&Path>,
) -> Result<Vec<u8>, String> {
    let Some((dir, binary)) = dir.zip(std::fs::metadata(ptxas).ok()) else {
        return compile_cubin(ptxas, ptx, arch, line_info);
    };
    let modified = binary
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let identity = format!(
        "{}\n{}\n{:?}\n{arch}\n{line_info}\n",
        ptxas.display(),
        binary.len(),
        modified
    );
    let file = dir.join(format!("{}.cubin", hash_hex(&identity, ptx)));
    match std::fs::read(&file) {
        Ok(bytes) if is_elf(&bytes) => return Ok(bytes),
        Ok(_) => eprintln!("replay: warning: {} is not a cubin; compiling it again", file.display()),
        Err(_) => {}
    }
    let cubin = compile_cubin(ptxas, ptx, arch, line_info)?;
    // Written whole under another name, then renamed: a reader never sees half a file.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{n}.tmp", std::process::id()));
    let stored = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, &cubin))
        .and_then(|()| std::fs::rename(&tmp, &file));
    if stored.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(cubin)
}

/// Runs `cmd` (the program `what`): its output when it succeeds, else an error with its
/// status and stderr.
fn run(cmd: &mut Command, what: &Path) -> Result<std::process::Output, String> {
    let out = cmd.output().map_err(|e| format!("running {}: {e}", what.display()))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{} failed ({}): {}",
            what.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether `bytes` start as an ELF image (what ptxas writes).
fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// The first 32 hex digits of the SHA-256 of `identity` then `ptx`.
fn hash_hex(identity: &str, ptx: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new().chain_update(identity).chain_update(ptx).finalize();
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Where ptxas's cubins are kept: `cubin/` beside the tuning cache
/// ([`crate::tune::cache::default_cache_path`]); `None` without a cache folder.
pub fn default_cubin_dir() -> Option<PathBuf> {
    crate::tune::cache::default_cache_path().and_then(|p| p.parent().map(|d| d.join("cubin")))
}

/// Compiles `ptx` for `arch` (e.g. `sm_90a`) with the ptxas at `ptxas` (with `-lineinfo`
/// when `line_info`) and returns the cubin. Each call uses files of its own in the temporary
/// directory, removed afterwards, so that calls may run in parallel. The error carries
/// ptxas's message.
pub fn compile_cubin(ptxas: &Path, ptx: &str, arch: &str, line_info: bool) -> Result<Vec<u8>, String> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let stem = std::env::temp_dir().join(format!("replay-jit-{}-{call}", std::process::id()));
    let (src, out) = (stem.with_extension("ptx"), stem.with_extension("cubin"));
    let result = (|| {
        std::fs::write(&src, ptx).map_err(|e| format!("writing {}: {e}", src.display()))?;
        let mut cmd = Command::new(ptxas);
        cmd.arg("-arch").arg(arch);
        if line_info {
            cmd.arg("-lineinfo");
        }
        run(cmd.arg("-o").arg(&out).arg(&src), ptxas)?;
        std::fs::read(&out).map_err(|e| format!("reading {}: {e}", out.display()))
    })();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&out);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |name: &str| map.get(name).cloned()
    }

    #[test]
    fn ptxas_when_found_unless_the_driver_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ptxas"), "").unwrap();
        let found = dir.path().join("ptxas");
        let path = dir.path().to_str().unwrap();
        for value in [None, Some(""), Some(" Auto ")] {
            let mut vars = vec![("PATH", path)];
            vars.extend(value.map(|v| ("REPLAY_JIT", v)));
            assert_eq!(
                Jit::from_env(env(&vars)),
                Ok(Jit::PtxasOrDriver(found.clone())),
                "{value:?}"
            );
            // None on PATH: the driver's JIT (unless the toolkit's default place has one).
            let usual = Path::new("/usr/local/cuda/bin/ptxas");
            let none = if usual.is_file() {
                Jit::PtxasOrDriver(usual.to_path_buf())
            } else {
                Jit::Driver
            };
            vars[0].1 = "/nonexistent";
            assert_eq!(Jit::from_env(env(&vars)), Ok(none), "{value:?} without a ptxas");
            // A REPLAY_PTXAS that is no file is an error, unless the driver is asked for.
            vars.push(("REPLAY_PTXAS", "/nonexistent/ptxas"));
            let err = Jit::from_env(env(&vars)).unwrap_err();
            assert!(err.contains("REPLAY_PTXAS=/nonexistent/ptxas"), "{value:?}: {err}");
        }
        let driver = [
            ("PATH", path),
            ("REPLAY_JIT", " Driver "),
            ("REPLAY_PTXAS", "/nonexistent/ptxas"),
        ];
        assert_eq!(Jit::from_env(env(&driver)), Ok(Jit::Driver));
        let asked = [("PATH", path), ("REPLAY_JIT", "ptxas")];
        assert_eq!(Jit::from_env(env(&asked)), Ok(Jit::Ptxas(found.clone())));
        let err = Jit::from_env(env(&[("REPLAY_JIT", "nvrtc")])).unwrap_err();
        assert!(err.contains("REPLAY_JIT=nvrtc") && err.contains("`ptxas`"), "{err}");
    }

    #[test]
    fn ptxas_asked_for_but_missing_is_an_error_naming_the_variable() {
        let vars = [
            ("REPLAY_JIT", "ptxas"),
            ("REPLAY_PTXAS", "/nonexistent/ptxas"),
            ("PATH", "/nonexistent"),
        ];
        let err = Jit::from_env(env(&vars)).unwrap_err();
        assert!(err.contains("REPLAY_PTXAS"), "{err}");
    }

    #[test]
    fn ptxas_is_found_on_path_and_by_the_variable_first() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("ptxas"), "").unwrap();
        }
        let path = std::env::join_paths([dir.path().join("none"), a.clone(), b.clone()]).unwrap();
        let path = path.to_str().unwrap();
        assert_eq!(find_ptxas(env(&[("PATH", path)])), Some(a.join("ptxas")));
        let named = b.join("ptxas");
        let vars = [("PATH", path), ("REPLAY_PTXAS", named.to_str().unwrap())];
        assert_eq!(find_ptxas(env(&vars)), Some(named));
        let cuda = dir.path().join("cuda");
        std::fs::create_dir_all(cuda.join("bin")).unwrap();
        std::fs::write(cuda.join("bin/ptxas"), "").unwrap();
        let home = [("PATH", "/nonexistent"), ("CUDA_HOME", cuda.to_str().unwrap())];
        assert_eq!(find_ptxas(env(&home)), Some(cuda.join("bin/ptxas")));
    }
}
