#[derive(Clone, Copy, waxell::DecisionOptions)]
enum Format {
    Markdown,
    Json,
}

#[waxell::decision(name = "format", options = Format)]
fn choose() -> waxell::Decision<Format> {
    waxell::Decision::new(Format::Markdwn)
}

fn main() {
    choose();
}
