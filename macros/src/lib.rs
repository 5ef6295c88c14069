//! `#[derive(GraphState)]`: declares a tollgate graph state at one line per
//! field.
//!
//! ```text
//! #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
//! struct Research {
//!     topic: String,                  // last value (default)
//!     #[reducer(append)]
//!     notes: Vec<String>,
//!     #[reducer(sum)]
//!     cost_cents: u64,
//!     #[reducer(my_crate::KeepLongest)] // any type implementing `Reducer<FieldType>`
//!     summary: String,
//! }
//! ```
//!
//! The derive generates `ResearchUpdate`, a partial update with an
//! `Option` per field and a builder method per field
//! (`ResearchUpdate::default().notes(vec![..])`), and implements `State`.
//! Built-in reducers: `last_value`, `append`, `messages`, `sum`, `min`,
//! `max`, `merge`. Generated code refers to the `tollgate` crate; a crate
//! that depends on `tollgate-engine` directly writes
//! `#[graph_state(crate = tollgate_engine)]`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::{parse_macro_input, Data, DeriveInput, Fields, Path};

/// Implements `State` for a struct with named fields and generates its
/// update type. See the crate docs.
#[proc_macro_derive(GraphState, attributes(reducer, graph_state))]
pub fn derive_graph_state(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input).unwrap_or_else(syn::Error::into_compile_error).into()
}

fn expand(input: DeriveInput) -> syn::Result<TokenStream2> {
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "GraphState does not support generic states",
        ));
    }
    let krate = crate_path(&input)?;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            Span::call_site(),
            "GraphState needs a struct with named fields",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(
            &data.fields,
            "GraphState needs a struct with named fields",
        ));
    };

    let name = &input.ident;
    let vis = &input.vis;
    let update = format_ident!("{}Update", name);
    let serde_crate = format!("{}::__private::serde", quote!(#krate).to_string().replace(' ', ""));
    let update_name = update.to_string();
    let field_count = fields.named.len();
    let update_doc = format!("Partial update of [`{name}`]: `Some` for each field a node writes.");

    let Parts { update_fields, setters, checks, folds, present, serialize_fields } =
        parts(fields, &krate, vis, &update)?;

    Ok(quote! {
        #[doc = #update_doc]
        #[derive(Debug, Clone, Default, #krate::__private::serde::Deserialize)]
        #[serde(crate = #serde_crate)]
        #vis struct #update {
            #(#update_fields)*
        }

        impl #update {
            #(#setters)*
        }

        // Unset fields are left out of human-readable forms (JSON) and kept,
        // as `None`, in compact ones (bincode), which cannot skip fields.
        impl #krate::__private::serde::Serialize for #update {
            fn serialize<S>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error>
            where
                S: #krate::__private::serde::Serializer,
            {
                let readable = serializer.is_human_readable();
                let fields = if readable { 0 #(+ #present)* } else { #field_count };
                let mut state = serializer.serialize_struct(#update_name, fields)?;
                #(#serialize_fields)*
                #krate::__private::serde::ser::SerializeStruct::end(state)
            }
        }

        impl #krate::State for #name {
            type Update = #update;
            type Schema = ();

            fn apply(
                &mut self,
                _schema: &(),
                writes: ::std::vec::Vec<#krate::Write<#update>>,
            ) -> ::core::result::Result<(), #krate::StateError> {
                #(#checks)*
                for write in writes {
                    #(#folds)*
                }
                ::core::result::Result::Ok(())
            }
        }
    })
}

/// The generated code of each field, by where it goes.
#[derive(Default)]
struct Parts {
    update_fields: Vec<TokenStream2>,
    setters: Vec<TokenStream2>,
    checks: Vec<TokenStream2>,
    folds: Vec<TokenStream2>,
    present: Vec<TokenStream2>,
    serialize_fields: Vec<TokenStream2>,
}

/// Each field's update field, setter, exclusivity check, fold, count and
/// serialisation.
fn parts(
    fields: &syn::FieldsNamed,
    krate: &Path,
    vis: &syn::Visibility,
    update: &syn::Ident,
) -> syn::Result<Parts> {
    let mut out = Parts::default();
    for field in &fields.named {
        let ident = field.ident.as_ref().expect("named fields have idents");
        let ty = &field.ty;
        let reducer = reducer_path(field, krate)?;
        let projection = quote!(<#reducer as #krate::Reducer<#ty>>);
        let field_name = ident.to_string();
        let field_doc = format!("Update of `{field_name}`.");
        let setter_doc = format!("Sets the update of `{field_name}`.");
        out.update_fields.push(quote! {
            #[doc = #field_doc]
            #[serde(default)]
            #vis #ident: ::core::option::Option<#projection::Update>,
        });
        out.setters.push(quote! {
            #[doc = #setter_doc]
            #vis fn #ident(mut self, value: #projection::Update) -> Self {
                self.#ident = ::core::option::Option::Some(value);
                self
            }
        });
        out.checks.push(quote! {
            #krate::__check_exclusive(#field_name, #projection::EXCLUSIVE, &writes, |u: &#update| u.#ident.is_some())?;
        });
        out.present.push(quote! { usize::from(self.#ident.is_some()) });
        out.serialize_fields.push(quote! {
            if !readable || self.#ident.is_some() {
                #krate::__private::serde::ser::SerializeStruct::serialize_field(&mut state, #field_name, &self.#ident)?;
            } else {
                #krate::__private::serde::ser::SerializeStruct::skip_field(&mut state, #field_name)?;
            }
        });
        out.folds.push(quote! {
            if let ::core::option::Option::Some(value) = write.update.#ident {
                #projection::reduce(&mut self.#ident, value);
            }
        });
    }
    Ok(out)
}

fn crate_path(input: &DeriveInput) -> syn::Result<Path> {
    let mut krate: Path = syn::parse_quote!(::tollgate);
    for attr in &input.attrs {
        if attr.path().is_ident("graph_state") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("crate") {
                    krate = meta.value()?.parse()?;
                    Ok(())
                } else {
                    Err(meta.error("expected `crate = path`"))
                }
            })?;
        }
    }
    Ok(krate)
}

fn reducer_path(field: &syn::Field, krate: &Path) -> syn::Result<TokenStream2> {
    let mut found = None;
    for attr in &field.attrs {
        if !attr.path().is_ident("reducer") {
            continue;
        }
        if found.is_some() {
            return Err(syn::Error::new_spanned(attr, "a field takes one #[reducer(..)]"));
        }
        let path: Path = attr.parse_args()?;
        let builtin = path.get_ident().map(|ident| ident.to_string());
        found = Some(match builtin.as_deref() {
            Some("last_value") => quote!(#krate::LastValue),
            Some("append") => quote!(#krate::Append),
            Some("messages") => quote!(#krate::Messages),
            Some("sum") => quote!(#krate::Sum),
            Some("min") => quote!(#krate::Min),
            Some("max") => quote!(#krate::Max),
            Some("merge") => quote!(#krate::MergeMap),
            _ => quote!(#path),
        });
    }
    Ok(found.unwrap_or_else(|| quote!(#krate::LastValue)))
}
