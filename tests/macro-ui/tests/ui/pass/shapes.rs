//! Every function shape the attributes support, under `#![deny(warnings)]`.
#![deny(warnings)]

use std::future::Future;

#[waxell::tool]
fn sync_fn(x: u8) -> u8 {
    x
}

#[waxell::agent(name = "a")]
async fn async_fn(x: &str) -> String {
    x.to_owned()
}

#[waxell::tool]
fn no_return(_x: u8) {}

#[waxell::step]
fn early_return(x: u8) -> Result<u8, String> {
    if x == 0 {
        return Err("zero".into());
    }
    let y: u8 = "5".parse::<u8>().map_err(|e| e.to_string())?;
    Ok(x + y)
}

#[waxell::tool]
fn boxed_dyn(flag: bool) -> Box<dyn std::fmt::Display> {
    if flag {
        return Box::new(1);
    }
    Box::new("x")
}

struct S {
    n: u8,
}

impl S {
    #[waxell::tool]
    fn by_ref(&self) -> u8 {
        self.n
    }
    #[waxell::tool]
    fn by_mut(&mut self) -> &mut u8 {
        &mut self.n
    }
    #[waxell::tool]
    fn by_value(self) -> u8 {
        self.n
    }
    #[waxell::tool]
    async fn async_ref(&self) -> u8 {
        self.n
    }
}

#[waxell::tool]
fn generic<T: Clone + std::fmt::Debug, const N: usize>(items: [T; N]) -> Vec<T> {
    items.to_vec()
}

#[waxell::tool]
fn lifetimes<'a, 'b: 'a>(a: &'a str, _b: &'b str) -> &'a str {
    a
}

#[waxell::tool]
fn impl_trait_arg(items: impl IntoIterator<Item = u8>) -> impl Iterator<Item = u8> {
    items.into_iter().map(|x| x + 1)
}

#[waxell::tool]
fn tail_future(x: u8) -> impl Future<Output = u8> {
    async move { x }
}

#[async_trait::async_trait]
trait Backend {
    async fn run(&self, code: &str) -> String;
}

struct B;

#[async_trait::async_trait]
impl Backend for B {
    #[waxell::tool(tool_type = "sandbox")]
    async fn run(&self, code: &str) -> String {
        code.to_owned()
    }
}

#[derive(Clone, Copy, waxell::DecisionOptions)]
enum Choice {
    Left,
    Right,
}

#[waxell::decision(name = "dir", options = Choice)]
fn typed_decision() -> waxell::Decision<Choice> {
    waxell::Decision::new(Choice::Right)
}

#[waxell::reasoning(step = "think")]
fn reason() -> waxell::Reasoning {
    waxell::Reasoning::new("t")
}

#[waxell::retrieval(source = "db", skip(limit))]
fn fetch(query: &str, limit: usize) -> Vec<String> {
    vec![query.to_owned(); limit]
}

#[waxell::tool(capture = false, skip_all)]
fn all_options((a, b): (u8, u8), _: u8) -> u8 {
    a + b
}

fn main() {
    let _ = Choice::Left;
    sync_fn(1);
    no_return(1);
    let _ = early_return(1);
    let _ = boxed_dyn(true);
    let mut s = S { n: 1 };
    s.by_ref();
    *s.by_mut() += 1;
    let _ = generic([1u8, 2]);
    let _ = lifetimes("a", "b");
    let _ = impl_trait_arg(vec![1]).count();
    let _ = typed_decision();
    let _ = reason();
    let _ = fetch("q", 1);
    let _ = all_options((1, 2), 3);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let _ = async_fn("x").await;
        let _ = s.async_ref().await;
        let _ = tail_future(1).await;
        let _ = B.run("c").await;
    });
    s.by_value();
}
