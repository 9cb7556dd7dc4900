#[waxell::tool(skip(secrett))]
fn run(secret: &str) -> usize {
    secret.len()
}

fn main() {
    run("x");
}
