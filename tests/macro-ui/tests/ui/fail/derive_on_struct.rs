#[derive(waxell::DecisionOptions)]
struct NotAnEnum;

fn main() {}
