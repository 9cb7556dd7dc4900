//! Attribute macros for [waxell](https://docs.rs/waxell). Use them through the `waxell` crate, which
//! re-exports them; this crate only parses, validates and emits code that calls `waxell`'s runtime.
//!
//! Every attribute works on sync and async functions, methods with `self`, generic functions, functions with
//! lifetimes and `impl Trait` arguments, `fn -> impl Future` whose tail is an `async` block, and under
//! `#[async_trait]`. Common arguments: `skip(arg, ...)`, `skip_all`, `capture = false`.
#![warn(missing_docs)]

mod attr;
mod derive;
mod expand;

use attr::Kind;
use proc_macro::TokenStream;

/// One agent run: span `invoke_agent {name}`; nested agents nest.
///
/// Arguments: `name = "..."` (default: the function name), `description = "..."` (default: the doc
/// comment), `session_id = <expr>`, `user_id = <expr>` (any `Display`, evaluated before the body), `skip(..)`,
/// `skip_all`, `capture = false`. `score()`, `tag()` and `metadata()` inside attach to this run.
#[proc_macro_attribute]
pub fn agent(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Agent, attr.into(), item.into()).into()
}

/// A tool call: span `execute_tool {name}` with `gen_ai.tool.*` attributes, the arguments and the result.
///
/// Arguments: `tool_type = "function" | "sandbox" | "api" | "database" | "search" | "file" | "extension"`
/// (default `function`), `name`, `description` (default: the doc comment), `skip(..)`, `skip_all`,
/// `capture = false`. `Err` results set error status and `error.type`.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Tool, attr.into(), item.into()).into()
}

/// A reasoning step: span `reasoning {step}` recording thought, evidence and conclusion from the returned
/// value (a `waxell::Reasoning`, or any serialisable value with those fields, or a string thought).
#[proc_macro_attribute]
pub fn reasoning(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Reasoning, attr.into(), item.into()).into()
}

/// A decision: span `decide {name}` recording options, chosen, reasoning and confidence from the returned
/// value (a `waxell::Decision`, or any serialisable value with `chosen`/`reasoning`/`confidence`, or the
/// chosen value itself). `options = ["a", "b"]` flags a chosen value outside the list; `options = MyEnum`
/// (an enum deriving `DecisionOptions`) makes a misspelt option a compile error. A confidence is also
/// recorded as the score `decision_confidence:{name}`.
#[proc_macro_attribute]
pub fn decision(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Decision, attr.into(), item.into()).into()
}

/// A container step: span `step {name}`.
#[proc_macro_attribute]
pub fn step(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Step, attr.into(), item.into()).into()
}

/// A retrieval: span `retrieval {source}` recording the query (the argument named `query`, else the first),
/// the result count and the results' `score` fields.
#[proc_macro_attribute]
pub fn retrieval(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Kind::Retrieval, attr.into(), item.into()).into()
}

/// Derive `waxell::DecisionOptions` for a fieldless enum: its variants, in snake_case, are the options.
#[proc_macro_derive(DecisionOptions)]
pub fn derive_decision_options(item: TokenStream) -> TokenStream {
    derive::decision_options(item.into()).into()
}
