//! The `waxell` command (`cargo install --path waxell --features cli`); see `waxell::cli`.

fn main() -> std::process::ExitCode {
    let code = waxell::cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    std::process::ExitCode::from(code)
}
