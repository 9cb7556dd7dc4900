#[derive(Clone, Copy, waxell::DecisionOptions)]
enum Format {
    Markdown,
    Json(u8),
}

fn main() {}
