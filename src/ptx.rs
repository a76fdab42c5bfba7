//! `replay ptx <kernel>`: the PTX of a kernel, or the text of any compiler stage.

use crate::error::CliError;
use replay_dsl::spec::KernelEntry;
use replay_dsl::{Compiled, Specialization, Target};

/// What to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Show {
    /// The PTX module.
    #[default]
    Ptx,
    /// The IR after the last pass.
    Ir,
    /// The text of the named stage.
    Stage(String),
    /// The stage names, one per line.
    Stages,
    /// What a launch needs: threads, warps, the occupancy hint and shared memory.
    Resources,
}

/// Parses `NAME=VALUE` (an integer, or `true` / `false`).
pub fn parse_set(s: &str) -> Result<(String, i64), CliError> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| CliError::Usage(format!("--set `{s}`: expected NAME=VALUE")))?;
    let value = match value.trim() {
        "true" => 1,
        "false" => 0,
        v => v
            .parse::<i64>()
            .map_err(|_| CliError::Usage(format!("--set `{s}`: `{v}` is not an integer or bool")))?,
    };
    Ok((name.trim().to_string(), value))
}

/// Compiles `entry` for `target` with its defaults overridden by `sets`; unknown names are an
/// error listing the kernel's constexprs.
pub fn compile(entry: &KernelEntry, target: Target, sets: &[(String, i64)]) -> Result<Output, CliError> {
    let defaults = (entry.defaults)();
    for (name, _) in sets {
        if !defaults.iter().any(|(n, _)| n == name) {
            return Err(CliError::UnknownConstexpr {
                kernel: entry.name.to_string(),
                name: name.clone(),
                known: defaults.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            });
        }
    }
    let values: Vec<(&str, i64)> = defaults
        .iter()
        .map(|(n, v)| {
            let v = sets.iter().rev().find(|(s, _)| s == n).map_or(*v, |(_, v)| *v);
            (*n, v)
        })
        .collect();
    let ir = (entry.trace)(&values, &Specialization::default())?;
    let compiled = replay_dsl::compile(&ir, target)?;
    // The IR stages are the trace and one per pass; the backend's stages follow them.
    let mut pass_stages = Vec::new();
    replay_dsl::passes::run_all(ir, &mut pass_stages)?;
    Ok(Output {
        ir_stages: (1 + pass_stages.len()).min(compiled.stages.len()),
        compiled,
    })
}

/// A compiled kernel and how many of its stages are IR (the rest come from the backend).
#[derive(Clone, Debug)]
pub struct Output {
    /// The compilation.
    pub compiled: Compiled,
    /// The number of IR stages at the head of `compiled.stages`.
    pub ir_stages: usize,
}

/// The text `show` asks for.
pub fn render(entry: &KernelEntry, out: &Output, show: &Show) -> Result<String, CliError> {
    let compiled = &out.compiled;
    let mut text = match show {
        Show::Ptx => compiled.ptx.clone(),
        Show::Stages => compiled.stage_names().join("\n"),
        Show::Resources => resources(compiled),
        Show::Ir => compiled
            .stages
            .get(out.ir_stages.saturating_sub(1))
            .map(|(_, t)| t.clone())
            .unwrap_or_default(),
        Show::Stage(name) => compiled
            .stage(name)
            .map(str::to_string)
            .ok_or_else(|| CliError::UnknownStage {
                kernel: entry.name.to_string(),
                name: name.clone(),
                known: compiled.stage_names().join(", "),
            })?,
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// The launch resources of a compiled kernel, one `name: value` per line.
fn resources(c: &Compiled) -> String {
    let warps = c.num_threads / 32;
    let kind = if c.dynamic_shared_bytes() > 0 {
        "dynamic"
    } else {
        "static"
    };
    let hint = match c.min_blocks {
        0 | 1 => "none".to_string(),
        b => format!("{b} programs per SM (registers capped to fit them)"),
    };
    format!(
        "entry: {}\nthreads: {} ({warps} warps)\noccupancy hint: {hint}\nshared memory: {} bytes ({kind})",
        c.entry, c.num_threads, c.shared_bytes
    )
}

/// Parses a `--target` value.
pub fn parse_target(s: &str) -> Result<Target, String> {
    Target::parse(s).ok_or_else(|| format!("unknown target `{s}` (expected sm_90 or sm_100)"))
}
