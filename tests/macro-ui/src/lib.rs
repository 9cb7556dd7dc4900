//! Nothing to use: this crate holds the trybuild cases of waxell's attribute macros (`tests/ui.rs`).
