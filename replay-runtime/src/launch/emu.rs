//! The emulator backend: runs a launch's PTX (compiled for the device's target, parsed once
//! per module) on the CPU through [`replay_ptx_emu`], with buffers copied into its memory and
//! back. Every access outside a buffer is an error naming the PTX instruction.
//!
//! With `REPLAY_EMU_PROFILE=DIR`, every launch adds its instruction counts (summed over
//! threads) to `DIR/<entry>.prof`: the kernel's PTX with each line's count in front, the
//! totals of every launch of that entry in this process so far.

use super::args::ArgValue;
use super::grid::Grid;
use super::host_copy::{copy_in, HostArgs};
use crate::driver::module::LoadedKernel;
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};
use replay_ptx_emu::{Global, Param};

/// Runs `loaded`'s PTX over `grid` with `loaded.info.num_threads` threads per block. Buffers
/// are read into host memory (ordered after the work already queued on `stream`), the kernel
/// is emulated, and every buffer is written back (so writes through shared references land,
/// as on a GPU).
pub fn run(stream: &Stream, loaded: &LoadedKernel, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
    let (Some(module), Some(compiled)) = (loaded.emu.as_ref(), loaded.compiled.as_ref()) else {
        return Err(RuntimeError::DeviceMismatch(format!(
            "`{}` was not loaded for the emulator",
            loaded.key.kernel
        )));
    };
    let mut global = Global::new();
    let HostArgs { buffers, params } = copy_in(
        stream,
        args,
        |_, bytes| global.alloc(bytes),
        |a| match a {
            Ok(id) => Param::Ptr(id),
            Err(ArgValue::I32(v)) => Param::I32(*v),
            Err(ArgValue::I64(v)) => Param::I64(*v),
            Err(ArgValue::U32(v)) => Param::U32(*v),
            Err(ArgValue::F32(v)) => Param::F32(*v),
            Err(ArgValue::Bool(v)) => Param::U8(*v as u8),
            Err(ArgValue::Buffer(_)) => unreachable!("buffers come as ids"),
        },
    )?;
    let result = module.launch_with_shared(
        &compiled.entry,
        [grid.x, grid.y, grid.z],
        [loaded.info.num_threads, 1, 1],
        loaded.info.dynamic_shared_bytes,
        &params,
        &mut global,
    );
    let set = global.graph_conditions().iter().map(|&(h, v)| (h as i64, v));
    stream.device().log_graph_conditions(set);
    // Blocks that ran before a fault keep their effects, as on a GPU.
    for (b, id) in &buffers {
        b.write_bytes(stream, global.bytes(*id))?;
    }
    let stats = result.map_err(|e| RuntimeError::Emulator {
        kernel: loaded.key.kernel.clone(),
        message: e.to_string(),
    })?;
    if let Some(dir) = std::env::var_os("REPLAY_EMU_PROFILE") {
        profile(
            std::path::Path::new(&dir),
            &compiled.entry,
            &compiled.ptx,
            &stats.per_line,
        )?;
    }
    Ok(())
}

/// Adds a launch's per-line counts to the totals of `entry` and writes them, as an annotated
/// listing of `ptx`, to `dir/<entry>.prof`.
fn profile(dir: &std::path::Path, entry: &str, ptx: &str, per_line: &[(usize, u64)]) -> Result<()> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static TOTALS: Mutex<Option<HashMap<String, Vec<u64>>>> = Mutex::new(None);
    let mut totals = TOTALS.lock().unwrap_or_else(|p| p.into_inner());
    let lines = ptx.lines().count();
    let counts = totals
        .get_or_insert_with(HashMap::new)
        .entry(entry.to_string())
        .or_insert_with(|| vec![0; lines + 1]);
    for &(line, n) in per_line {
        if let Some(c) = counts.get_mut(line) {
            *c += n;
        }
    }
    let total: u64 = counts.iter().sum();
    let mut out = format!("// {entry}: {total} thread-instructions\n");
    for (i, text) in ptx.lines().enumerate() {
        let n = counts[i + 1];
        let share = 100.0 * n as f64 / total.max(1) as f64;
        out += &format!("{n:>12} {share:5.2}% | {text}\n");
    }
    let io = |e: std::io::Error| RuntimeError::Emulator {
        kernel: entry.to_string(),
        message: format!("writing the profile to {}: {e}", dir.display()),
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join(format!("{entry}.prof")), out).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::profile;

    #[test]
    fn profiles_sum_over_launches() {
        let dir = std::env::temp_dir().join(format!("replay-emu-profile-{}", std::process::id()));
        let ptx = "\tmov.u32 %r1, 1;\n\tadd.u32 %r1, %r1, 1;\n\tret;\n";
        profile(&dir, "profiled_entry", ptx, &[(1, 32), (2, 64), (3, 32)]).unwrap();
        profile(&dir, "profiled_entry", ptx, &[(1, 32), (2, 0), (3, 32)]).unwrap();
        let text = std::fs::read_to_string(dir.join("profiled_entry.prof")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "// profiled_entry: 192 thread-instructions");
        assert!(lines[1].trim_start().starts_with("64 ") && lines[1].ends_with("| \tmov.u32 %r1, 1;"));
        assert!(lines[2].trim_start().starts_with("64 ") && lines[2].contains("33.33%"));
        assert!(lines[3].trim_start().starts_with("64 ") && lines[3].ends_with("ret;"));
    }
}
