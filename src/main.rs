//! The `replay` command: see [`replay::cli`].

fn main() -> std::process::ExitCode {
    replay::cli::main()
}
