//! `replay kernels`: every registered kernel with its parameters and constexprs (defaults).

use crate::error::CliError;
use replay_dsl::spec::KernelEntry;
use std::io::Write;

/// The registry's kernels.
pub fn registry() -> Vec<KernelEntry> {
    replay_kernels::registry()
}

/// The registered kernel called `name`, or an error listing the known names.
pub fn find(name: &str) -> Result<KernelEntry, CliError> {
    let all = registry();
    all.iter()
        .find(|k| k.name == name)
        .copied()
        .ok_or_else(|| CliError::UnknownKernel {
            name: name.to_string(),
            known: all.iter().map(|k| k.name).collect::<Vec<_>>().join(", "),
        })
}

/// The text `replay kernels` prints.
pub fn listing() -> String {
    let mut s = String::new();
    for k in registry() {
        let params: Vec<String> = (k.params)()
            .iter()
            .map(|p| format!("{}: {}", p.name, p.dtype))
            .collect();
        let consts: Vec<String> = (k.defaults)().iter().map(|(n, v)| format!("{n} = {v}")).collect();
        s.push_str(&format!(
            "{}\n  params:     {}\n  constexprs: {}\n",
            k.name,
            params.join(", "),
            consts.join(", ")
        ));
    }
    s
}

/// Runs `replay kernels`.
pub fn run(out: &mut dyn Write) -> Result<(), CliError> {
    out.write_all(listing().as_bytes()).map_err(|e| CliError::Io {
        path: "<stdout>".into(),
        source: e,
    })
}
