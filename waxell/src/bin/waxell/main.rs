//! The `waxell` command (`cargo install --path waxell --features cli`): `replay` and `show`, in `cli.rs`.

mod cli;

fn main() -> std::process::ExitCode {
    let code = cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    std::process::ExitCode::from(code)
}
