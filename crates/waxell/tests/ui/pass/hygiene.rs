//! The expansions use absolute paths only: they work without the prelude.
#![no_implicit_prelude]

#[::waxell::tool(tool_type = "function")]
fn add(a: u8, b: u8) -> ::std::result::Result<u8, ::std::string::String> {
    ::std::result::Result::Ok(a + b)
}

#[::waxell::agent(name = "hygienic", session_id = "s")]
async fn agent() -> u8 {
    match add(1, 2) {
        ::std::result::Result::Ok(v) => v,
        ::std::result::Result::Err(_) => 0,
    }
}

fn main() {
    let _ = agent();
}
