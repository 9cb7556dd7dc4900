#[waxell::tool(tool_kind = "sandbox")]
fn run(code: &str) -> usize {
    code.len()
}

fn main() {
    // The function is still emitted: no "cannot find function" error follows.
    run("x");
}
