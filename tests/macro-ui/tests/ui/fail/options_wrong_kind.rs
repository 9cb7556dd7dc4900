#[waxell::decision(name = "d", options = 3)]
fn choose() -> String {
    "a".into()
}

fn main() {
    choose();
}
