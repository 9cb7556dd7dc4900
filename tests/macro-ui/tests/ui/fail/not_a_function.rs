#[waxell::tool]
struct NotAFunction;

fn main() {}
