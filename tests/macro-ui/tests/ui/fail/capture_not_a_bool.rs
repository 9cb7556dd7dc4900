#[waxell::tool(capture = "no")]
fn run() {}

fn main() {
    run();
}
