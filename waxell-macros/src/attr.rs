//! Parsing and validating the attributes' arguments into a typed model that keeps spans for errors.

use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprArray, ExprLit, ExprPath, Ident, Lit, LitBool, LitStr, Meta, Token};

pub(crate) use waxell_kind::Kind;

/// The keys each attribute accepts.
fn keys(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Agent => &[
            "name",
            "description",
            "session_id",
            "user_id",
            "skip",
            "skip_all",
            "capture",
        ],
        Kind::Tool => &["name", "tool_type", "description", "skip", "skip_all", "capture"],
        Kind::Reasoning => &["step", "skip", "skip_all", "capture"],
        Kind::Decision => &["name", "options", "skip", "skip_all", "capture"],
        Kind::Step => &["name", "skip", "skip_all", "capture"],
        Kind::Retrieval => &["source", "skip", "skip_all", "capture"],
    }
}

/// The tool types `#[tool(tool_type = ...)]` accepts.
pub(crate) const TOOL_TYPES: &[&str] = &[
    "function",
    "sandbox",
    "api",
    "database",
    "search",
    "file",
    "extension",
];

/// `options = [...]` or `options = SomeEnum`.
pub(crate) enum Options {
    List(Vec<LitStr>),
    Type(ExprPath),
}

/// The validated arguments of one attribute.
#[derive(Default)]
pub(crate) struct Args {
    /// `name`, `step` or `source`, whichever the attribute uses.
    pub(crate) name: Option<LitStr>,
    pub(crate) tool_type: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    pub(crate) options: Option<Options>,
    pub(crate) session_id: Option<Expr>,
    pub(crate) user_id: Option<Expr>,
    pub(crate) skip: Vec<Ident>,
    pub(crate) skip_all: bool,
    pub(crate) capture: Option<LitBool>,
}

fn string_lit(key: &str, expr: &Expr) -> syn::Result<LitStr> {
    match expr {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        other => Err(syn::Error::new(
            other.span(),
            format!("`{key}` expects a string literal, e.g. {key} = \"...\""),
        )),
    }
}

fn push_error(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(all) => all.combine(e),
        None => *errors = Some(e),
    }
}

/// Parse `key = value, flag, list(...)` for `kind`, reporting every problem at its token.
pub(crate) fn parse(kind: Kind, tokens: proc_macro2::TokenStream) -> syn::Result<Args> {
    let metas = syn::parse::Parser::parse2(Punctuated::<Meta, Token![,]>::parse_terminated, tokens)?;
    let mut args = Args::default();
    let mut seen: Vec<String> = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for meta in metas {
        let path = meta.path();
        let Some(key) = path.get_ident().map(Ident::to_string) else {
            push_error(
                &mut errors,
                syn::Error::new(path.span(), "expected a plain argument name"),
            );
            continue;
        };
        if !keys(kind).contains(&key.as_str()) {
            push_error(
                &mut errors,
                syn::Error::new(
                    path.span(),
                    format!(
                        "unknown argument `{key}` for #[{}]; expected one of: {}",
                        kind.attribute(),
                        keys(kind).join(", ")
                    ),
                ),
            );
            continue;
        }
        if seen.contains(&key) {
            push_error(
                &mut errors,
                syn::Error::new(path.span(), format!("`{key}` is given more than once")),
            );
            continue;
        }
        seen.push(key.clone());
        if let Err(e) = apply(kind, &mut args, &key, meta) {
            push_error(&mut errors, e);
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(args),
    }
}

fn apply(kind: Kind, args: &mut Args, key: &str, meta: Meta) -> syn::Result<()> {
    match (key, meta) {
        ("skip_all", Meta::Path(_)) => args.skip_all = true,
        ("skip", Meta::List(list)) => {
            let names = list.parse_args_with(Punctuated::<Ident, Token![,]>::parse_terminated)?;
            if names.is_empty() {
                return Err(syn::Error::new(
                    list.span(),
                    "`skip(...)` needs at least one argument name",
                ));
            }
            args.skip.extend(names);
        }
        ("skip", other) => {
            return Err(syn::Error::new(
                other.span(),
                "write `skip(arg, ...)` with the argument names",
            ))
        }
        ("skip_all", other) => return Err(syn::Error::new(other.span(), "`skip_all` takes no value")),
        (_, Meta::NameValue(nv)) => match key {
            "name" | "step" | "source" => {
                let lit = string_lit(key, &nv.value)?;
                if lit.value().trim().is_empty() {
                    return Err(syn::Error::new(lit.span(), format!("`{key}` must not be empty")));
                }
                args.name = Some(lit);
            }
            "description" => args.description = Some(string_lit(key, &nv.value)?),
            "tool_type" => {
                let lit = string_lit(key, &nv.value)?;
                if !TOOL_TYPES.contains(&lit.value().as_str()) {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "unknown tool_type {:?}; expected one of: {}",
                            lit.value(),
                            TOOL_TYPES.join(", ")
                        ),
                    ));
                }
                args.tool_type = Some(lit);
            }
            "capture" => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => args.capture = Some(b.clone()),
                other => {
                    return Err(syn::Error::new(
                        other.span(),
                        "`capture` expects `true` or `false`",
                    ))
                }
            },
            "session_id" => args.session_id = Some(nv.value),
            "user_id" => args.user_id = Some(nv.value),
            "options" => args.options = Some(parse_options(&nv.value)?),
            _ => {
                return Err(syn::Error::new(
                    nv.path.span(),
                    format!("`{key}` is not supported by #[{}]", kind.attribute()),
                ))
            }
        },
        (_, other) => {
            return Err(syn::Error::new(
                other.span(),
                format!("`{key}` expects a value: {key} = ..."),
            ));
        }
    }
    Ok(())
}

fn parse_options(expr: &Expr) -> syn::Result<Options> {
    match expr {
        Expr::Array(ExprArray { elems, bracket_token, .. }) => {
            if elems.is_empty() {
                return Err(syn::Error::new(bracket_token.span.join(), "`options` must list at least one option"));
            }
            let mut list: Vec<LitStr> = Vec::new();
            for e in elems {
                let lit = string_lit("options", e)?;
                if list.iter().any(|l| l.value() == lit.value()) {
                    return Err(syn::Error::new(lit.span(), format!("option {:?} is listed twice", lit.value())));
                }
                list.push(lit);
            }
            Ok(Options::List(list))
        }
        Expr::Path(p) => Ok(Options::Type(p.clone())),
        other => Err(syn::Error::new(
            other.span(),
            "`options` expects a list of string literals, e.g. options = [\"a\", \"b\"], or an enum deriving waxell::DecisionOptions",
        )),
    }
}
