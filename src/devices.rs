//! `replay devices`, and how the measuring commands pick their device: the GPU when there is
//! one, else the CPU interpreter (said plainly, at small sizes).

use crate::error::CliError;
use crate::gallery::Scale;
use crate::table::{Align, Table};
use replay_runtime::{Device, RuntimeError};
use std::io::Write;

/// Why there is no GPU to run on, or `None` when `err` is a real failure.
pub fn no_gpu_reason(err: &RuntimeError) -> Option<String> {
    match err {
        RuntimeError::NoDriver { tried, .. } => Some(format!(
            "no CUDA driver on this machine (could not load {})",
            tried.join(" or ")
        )),
        RuntimeError::NoDevice { count: 0, .. } => Some("the CUDA driver reports no GPU".to_string()),
        RuntimeError::NoDevice { ordinal, count } => Some(format!("no GPU with ordinal {ordinal} ({count} found)")),
        RuntimeError::UnsupportedGpu { .. } => Some(err.to_string()),
        _ => None,
    }
}

/// The device a measuring command runs on.
#[derive(Debug)]
pub struct Choice {
    /// The device.
    pub device: Device,
    /// GPU or interpreter sizes.
    pub scale: Scale,
    /// Why the interpreter is used (no GPU, `--interpret`, `REPLAY_INTERPRET`); `None` on a GPU.
    pub note: Option<String>,
}

impl Choice {
    /// True when the device is a GPU.
    pub fn is_gpu(&self) -> bool {
        self.note.is_none()
    }
}

/// GPU 0, or the interpreter when asked (`interpret`, `REPLAY_INTERPRET=1`) or when there is
/// no GPU. Driver failures other than "no driver / no device / unsupported GPU" are errors.
pub fn choose(interpret: bool) -> Result<Choice, CliError> {
    let env = replay_runtime::driver::device::interpret_requested(std::env::var("REPLAY_INTERPRET").ok().as_deref());
    if interpret || env {
        let why = if interpret {
            "--interpret"
        } else {
            "REPLAY_INTERPRET is set"
        };
        return Ok(Choice {
            device: Device::interpreter(),
            scale: Scale::Small,
            note: Some(format!("{why}: running on the CPU interpreter at small sizes")),
        });
    }
    match Device::cuda(0) {
        Ok(device) => Ok(Choice {
            device,
            scale: Scale::Gpu,
            note: None,
        }),
        Err(e) => match no_gpu_reason(&e) {
            Some(reason) => Ok(Choice {
                device: Device::interpreter(),
                scale: Scale::Small,
                note: Some(format!(
                    "no GPU: {reason}; running on the CPU interpreter at small sizes"
                )),
            }),
            None => Err(e.into()),
        },
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Runs `replay devices`: one row per GPU; without a driver or GPU one line saying so (exit 0).
pub fn run(out: &mut dyn Write) -> Result<(), CliError> {
    let io = |e| CliError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    let mut t = Table::new([
        "#",
        "name",
        "cc",
        "target",
        "memory",
        "SMs",
        "L2",
        "smem/block",
        "driver",
    ])
    .align(0, Align::Right)
    .align(5, Align::Right);
    let mut ordinal = 0;
    loop {
        match Device::cuda(ordinal) {
            Ok(d) => {
                let i = d.info();
                t.row([
                    ordinal.to_string(),
                    i.name.clone(),
                    format!("{}.{}", i.compute_capability.0, i.compute_capability.1),
                    i.target.map_or("-".into(), |t| t.arch().to_string()),
                    gib(i.total_memory),
                    i.sm_count.to_string(),
                    format!("{} MiB", i.l2_bytes >> 20),
                    format!("{} KiB", i.max_shared_per_block / 1024),
                    format!("{}.{}", i.driver_version.0, i.driver_version.1),
                ]);
            }
            Err(RuntimeError::NoDevice { .. }) if ordinal > 0 => break,
            Err(e @ RuntimeError::UnsupportedGpu { .. }) => {
                writeln!(out, "GPU {ordinal}: {e}").map_err(io)?;
            }
            Err(e) => match no_gpu_reason(&e) {
                Some(reason) => {
                    writeln!(
                        out,
                        "no GPU: {reason}; kernels can still run on the CPU interpreter (REPLAY_INTERPRET=1)"
                    )
                    .map_err(io)?;
                    return Ok(());
                }
                None => return Err(e.into()),
            },
        }
        ordinal += 1;
    }
    write!(out, "{t}").map_err(io)?;
    Ok(())
}
