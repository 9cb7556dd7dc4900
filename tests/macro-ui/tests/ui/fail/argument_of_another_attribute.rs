#[waxell::reasoning(name = "plan")]
fn think() -> String {
    "t".into()
}

fn main() {
    think();
}
