//! Code generation. Expansions stay small: they build a static `Meta`, capture arguments, and hand the body
//! to `::waxell::__private::Run`, which does the rest at run time.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Block, Expr, FnArg, Ident, ItemFn, Pat, ReturnType, Stmt, Type};

use crate::attr::{Args, Kind, Options};

/// Expand `#[kind(args)]` on `item`. On any error the item is still emitted, followed by `compile_error!`,
/// so the rest of the crate keeps type-checking and rust-analyzer keeps working.
pub(crate) fn expand(kind: Kind, attr: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let message = format!(
                "#[{}] applies to functions and methods with a body",
                kind.attribute()
            );
            let error = syn::Error::new(proc_macro2::Span::call_site(), message).to_compile_error();
            return quote! { #item #error };
        }
    };
    let args = match crate::attr::parse(kind, attr).and_then(|args| check_skips(&function, args)) {
        Ok(args) => args,
        Err(e) => {
            let error = e.to_compile_error();
            return quote! { #function #error };
        }
    };
    let output = instrument(kind, &args, function);
    if std::env::var_os("WAXELL_MACROS_DEBUG").is_some() {
        eprintln!("{output}");
    }
    output
}

/// `skip(x)` must name arguments that exist.
fn check_skips(function: &ItemFn, args: Args) -> syn::Result<Args> {
    let names: Vec<String> = arg_idents(function).iter().map(|i| i.to_string()).collect();
    let mut errors: Option<syn::Error> = None;
    for skipped in &args.skip {
        if !names.contains(&skipped.to_string()) {
            let e = syn::Error::new(
                skipped.span(),
                format!("`skip` names `{skipped}`, which is not an argument of this function"),
            );
            match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            }
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(args),
    }
}

/// Arguments bound to a plain identifier (not `self`, not destructuring patterns, not `_`).
fn arg_idents(function: &ItemFn) -> Vec<Ident> {
    function
        .sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(pt) => match &*pt.pat {
                Pat::Ident(pi) if pi.ident != "_" => Some(pi.ident.clone()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}

fn doc_comment(function: &ItemFn) -> Option<String> {
    let lines: Vec<String> = function
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let text = lines.join(" ").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// Whether a type mentions `impl Trait` (which cannot be written in a `let` or closure annotation).
fn contains_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut f = Finder(false);
    f.visit_type(ty);
    f.0
}

fn instrument(kind: Kind, args: &Args, mut function: ItemFn) -> TokenStream {
    let fn_name = function.sig.ident.to_string();
    let name = args
        .name
        .as_ref()
        .map(|l| l.value())
        .unwrap_or_else(|| fn_name.clone());
    // The name is written into the expansion whole, so a call never formats it.
    let span_name = format!("{} {name}", kind.operation());
    let kind_tokens = Ident::new(kind.variant(), Span::call_site());
    let description = match args
        .description
        .as_ref()
        .map(|l| l.value())
        .or_else(|| doc_comment(&function))
    {
        Some(d) => quote!(::core::option::Option::Some(#d)),
        None => quote!(::core::option::Option::None),
    };
    let tool_type = match kind {
        Kind::Tool => args
            .tool_type
            .as_ref()
            .map(|l| l.value())
            .unwrap_or_else(|| "function".to_owned()),
        _ => String::new(),
    };
    let options = match &args.options {
        Some(Options::List(list)) => quote!(&[#(#list),*]),
        Some(Options::Type(path)) => {
            quote_spanned!(path.span()=> <#path as ::waxell::DecisionOptions>::OPTIONS)
        }
        None => quote!(&[]),
    };
    let capture = args.capture.as_ref().is_none_or(|b| b.value);

    let captured: Vec<Ident> = if args.skip_all || !capture {
        Vec::new()
    } else {
        arg_idents(&function)
            .into_iter()
            .filter(|i| !args.skip.iter().any(|s| s == i))
            .collect()
    };
    let captured_names: Vec<String> = captured.iter().map(|i| i.to_string()).collect();

    let start = quote! {
        static __WAXELL_META: ::waxell::__private::Meta = ::waxell::__private::Meta {
            kind: ::waxell::__private::Kind::#kind_tokens,
            span_name: #span_name,
            name: #name,
            description: #description,
            tool_type: #tool_type,
            options: #options,
            capture: #capture,
        };
        let __waxell_run = ::waxell::__private::Run::start(&__WAXELL_META, || {
            #[allow(unused_imports)]
            use ::waxell::__private::{CaptureViaDebug as _, CaptureViaSerialize as _, CaptureViaTypeName as _};
            ::std::vec![#((#captured_names, (&&&::waxell::__private::Probe(&#captured)).__waxell_capture())),*]
        });
    };
    let ids = if args.session_id.is_some() || args.user_id.is_some() {
        let to_id = |e: &Option<Expr>| match e {
            Some(e) => {
                quote_spanned!(e.span()=> ::core::option::Option::Some(::std::string::ToString::to_string(&(#e))))
            }
            None => quote!(::core::option::Option::None),
        };
        let (s, u) = (to_id(&args.session_id), to_id(&args.user_id));
        quote! { ::waxell::__private::Run::set_ids(&__waxell_run, #s, #u); }
    } else {
        TokenStream::new()
    };
    let finish = quote! {
        ::waxell::__private::Run::finish(&__waxell_run, |__waxell_wants_value| {
            #[allow(unused_imports)]
            use ::waxell::__private::{
                PlainAny as _, PlainDebug as _, PlainSer as _, ResultAnyAny as _, ResultAnyDebug as _,
                ResultAnyDisplay as _, ResultDebugDisplay as _, ResultSerDisplay as _,
            };
            (&&&&&&&&::waxell::__private::Probe(&__waxell_ret)).__waxell_outcome(__waxell_wants_value)
        });
    };

    let ret_ty: Option<Type> = match &function.sig.output {
        ReturnType::Type(_, ty) if !contains_impl_trait(ty) => Some((**ty).clone()),
        ReturnType::Type(..) => None,
        ReturnType::Default => Some(syn::parse_quote!(())),
    };
    // The fake return edge fixes the body's return type to the function's, so `return` and `?` inside
    // the wrapped body coerce exactly as they did before instrumentation.
    let fake_return = match &ret_ty {
        Some(ty) => quote_spanned! {ty.span()=>
            #[allow(unknown_lints, unreachable_code, clippy::diverging_sub_expression, clippy::let_unit_value, clippy::unreachable, clippy::empty_loop, clippy::needless_return)]
            if false {
                let __waxell_fake_return: #ty = loop {};
                return __waxell_fake_return;
            }
        },
        None => TokenStream::new(),
    };
    let body: Block = (*function.block).clone();

    let new_body = if function.sig.asyncness.is_some() {
        quote! {{
            #start
            #ids
            let __waxell_ret = ::waxell::__private::Run::instrument(&__waxell_run, async move { #fake_return #body }).await;
            #finish
            __waxell_ret
        }}
    } else if let Some(tail) = tail_future(&function.block) {
        // `fn -> impl Future { ...; async move {..} }` and `#[async_trait]`'s `Box::pin(async move {..})`:
        // instrument the returned future, so the span covers its execution, not just its construction.
        let mut block = (*function.block).clone();
        let (wrapped, boxed) = tail;
        let instrumented = quote! {{
            #start
            #ids
            async move {
                let __waxell_ret = ::waxell::__private::Run::instrument(&__waxell_run, #wrapped).await;
                #finish
                __waxell_ret
            }
        }};
        let new_tail: Expr = if boxed {
            syn::parse_quote!(::std::boxed::Box::pin(#instrumented))
        } else {
            syn::parse_quote!(#instrumented)
        };
        if let Some(Stmt::Expr(e, None)) = block.stmts.last_mut() {
            *e = new_tail;
        }
        block.into_token_stream()
    } else {
        quote! {{
            #start
            #ids
            let __waxell_ret = ::waxell::__private::Run::in_scope(&__waxell_run, move || { #fake_return #body });
            #finish
            __waxell_ret
        }}
    };
    function.block = Box::new(syn::parse2(new_body).unwrap_or_else(|_| (*function.block).clone()));
    function.into_token_stream()
}

/// If the block ends in `async move {..}` or `Box::pin(async move {..})`, return that future expression and
/// whether it was boxed.
fn tail_future(block: &Block) -> Option<(Expr, bool)> {
    match block.stmts.last()? {
        Stmt::Expr(Expr::Async(a), None) => Some((Expr::Async(a.clone()), false)),
        Stmt::Expr(Expr::Call(call), None) => {
            let Expr::Path(p) = &*call.func else { return None };
            let is_pin = p.path.segments.last().is_some_and(|s| s.ident == "pin")
                && p.path.segments.iter().any(|s| s.ident == "Box");
            match (is_pin, call.args.len(), call.args.first()) {
                (true, 1, Some(Expr::Async(a))) => Some((Expr::Async(a.clone()), true)),
                _ => None,
            }
        }
        _ => None,
    }
}
