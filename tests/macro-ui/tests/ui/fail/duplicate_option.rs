#[waxell::decision(name = "d", options = ["a", "b", "a"])]
fn choose() -> String {
    "a".into()
}

fn main() {
    choose();
}
