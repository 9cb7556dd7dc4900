#[waxell::tool(skip = "secret")]
fn run(secret: &str) -> usize {
    secret.len()
}

fn main() {
    run("x");
}
