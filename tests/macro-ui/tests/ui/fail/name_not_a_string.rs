#[waxell::tool(name = run_code)]
fn run() {}

fn main() {
    run();
}
