//! Builds the clients another crate of the user's tree builds, with waxell in the same graph and no
//! process-wide rustls provider installed (the state of a program that never chose one). A panic ("No rustls
//! crypto provider is configured") fails the run.

fn main() {
    let _plain = reqwest::Client::new();
    let _openai = async_openai::Client::with_config(async_openai::config::OpenAIConfig::new());
    // waxell's own clients in the same process.
    let _builder = waxell::builder();
    println!("built beside waxell: reqwest::Client::new(), async_openai::Client::with_config()");
}
