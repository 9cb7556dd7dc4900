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
    let _ = clashing_traits::with_clash(1);
    let _ = clashing_traits::sync_with_clash(1);
}

/// Traits in the caller's scope whose methods share names with the runtime's (as `tracing::Instrument` does)
/// must not capture the expansion's calls.
mod clashing_traits {
    pub trait Instrument: ::core::marker::Sized {
        fn instrument(self, _other: u8) -> Self {
            self
        }
        fn finish(self) {}
        fn in_scope(self) {}
        fn set_ids(self) {}
    }
    impl<T> Instrument for T {}

    #[allow(unused_imports)]
    use self::Instrument as _;

    #[::waxell::tool]
    pub async fn with_clash(x: u8) -> u8 {
        x
    }

    #[::waxell::agent(session_id = "s")]
    pub fn sync_with_clash(x: u8) -> u8 {
        x
    }
}
