//! The `waxell` command (`cargo install --path waxell --features cli`): `replay` and `show`, in `cli.rs`;
//! `ui` (feature `ui`) in `ui.rs`.

mod cli;
#[cfg(feature = "ui")]
mod ui;

fn main() -> std::process::ExitCode {
    #[cfg(feature = "ui")]
    let _ = cli::UI_COMMAND.set(ui::run);
    let code = cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    std::process::ExitCode::from(code)
}
