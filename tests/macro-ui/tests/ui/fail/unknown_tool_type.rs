#[waxell::tool(tool_type = "sandboxx")]
fn run() {}

fn main() {
    run();
}
