#[waxell::decision(name = "d", options = [])]
fn choose() -> String {
    "a".into()
}

fn main() {
    choose();
}
