//! `#[derive(DecisionOptions)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields};

fn snake_case(ident: &str) -> String {
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, c) in ident.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn decision_options(item: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(item) {
        Ok(i) => i,
        Err(e) => return e.to_compile_error(),
    };
    let Data::Enum(data) = &input.data else {
        return syn::Error::new_spanned(
            &input.ident,
            "DecisionOptions can only be derived for an enum whose variants are the options",
        )
        .to_compile_error();
    };
    if data.variants.is_empty() {
        return syn::Error::new_spanned(&input.ident, "DecisionOptions needs at least one variant")
            .to_compile_error();
    }
    let mut errors: Option<syn::Error> = None;
    for v in &data.variants {
        if !matches!(v.fields, Fields::Unit) {
            let e = syn::Error::new_spanned(&v.fields, "decision options must be fieldless variants");
            match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            }
        }
    }
    if let Some(e) = errors {
        return e.to_compile_error();
    }
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let variants: Vec<_> = data.variants.iter().map(|v| &v.ident).collect();
    let names: Vec<String> = variants.iter().map(|v| snake_case(&v.to_string())).collect();
    quote! {
        impl #impl_generics ::waxell::DecisionOptions for #ident #ty_generics #where_clause {
            const OPTIONS: &'static [&'static str] = &[#(#names),*];
            fn as_str(&self) -> &'static str {
                match self {
                    #(Self::#variants => #names,)*
                }
            }
        }
    }
}
