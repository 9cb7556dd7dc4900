#[waxell::agent(name = "a", name = "b")]
fn run() {}

fn main() {
    run();
}
