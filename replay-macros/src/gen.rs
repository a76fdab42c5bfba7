//! Code generation: the kernel's module, `Config`, `Kernel: KernelDef`, `trace`, `compile`.

use crate::sig::{extent_names, CTy, KernelOptions, KernelSig};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Block, Ident, LitStr};

fn mixed(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// Generates the module. `body` is `None` when the body had errors (already reported): the
/// module is still generated, with an empty body, so that uses of it do not add errors.
pub fn generate(k: &KernelSig, options: &KernelOptions, source: &str, body: Option<&Block>) -> TokenStream {
    let default_warps = options.num_warps;
    let default_blocks = options.min_blocks;
    let vis = &k.vis;
    let name = &k.name;
    let name_str = LitStr::new(&name.to_string(), name.span());
    let attrs = &k.attrs;
    let source = LitStr::new(source, Span::call_site());

    let cfg = mixed("__replay_cfg");
    let spec = mixed("__replay_spec");
    let args = mixed("__replay_args");
    let scalars = mixed("__replay_scalars");

    // Config.
    let c_names: Vec<&Ident> = k.constexprs.iter().map(|c| &c.name).collect();
    let c_strs: Vec<LitStr> = c_names.iter().map(|n| LitStr::new(&n.to_string(), n.span())).collect();
    let c_tys: Vec<TokenStream> = k.constexprs.iter().map(|c| c.ty.rust_ty(c.ty_span)).collect();
    let config_doc = LitStr::new(&format!(" Constexpr configuration of `{name}`."), Span::call_site());
    let warps_doc = LitStr::new(
        &format!(" Warps per program (a power of two ≤ 32; {default_warps} by default)."),
        Span::call_site(),
    );
    let blocks_doc = LitStr::new(
        &format!(
            " Occupancy hint: programs that should fit on one SM at once (`.minnctapersm`; ptxas caps \
             the registers to fit them; ≥ 1, {default_blocks} by default, 1 is no hint)."
        ),
        Span::call_site(),
    );
    let kernel_doc = LitStr::new(&format!(" `{name}` as a kernel definition."), Span::call_site());
    let trace_doc = LitStr::new(
        &format!(" Traces `{name}` for `config` without argument specialization."),
        Span::call_site(),
    );
    let compile_doc = LitStr::new(
        &format!(" Traces `{name}` for `config` and compiles it for `target`."),
        Span::call_site(),
    );
    let default_impl = if k.constexprs.iter().all(|c| c.default.is_some()) {
        let defaults: Vec<TokenStream> = k
            .constexprs
            .iter()
            .map(|c| c.default_expr().expect("default"))
            .collect();
        quote! {
            impl ::core::default::Default for Config {
                fn default() -> Self {
                    Config { #(#c_names: #defaults,)* num_warps: #default_warps, min_blocks: #default_blocks }
                }
            }
        }
    } else {
        quote!()
    };

    // ConfigValues.
    let values: Vec<TokenStream> = k
        .constexprs
        .iter()
        .map(|c| {
            let n = &c.name;
            let s = LitStr::new(&n.to_string(), n.span());
            quote!((#s, self.#n as i64))
        })
        .collect();
    let slots: Vec<Ident> = (0..k.constexprs.len())
        .map(|i| mixed(&format!("__replay_v{i}")))
        .collect();
    let warps_slot = mixed("__replay_warps");
    let blocks_slot = mixed("__replay_blocks");
    let err = mixed("__replay_err");
    let expected = {
        let mut v: Vec<String> = k.constexprs.iter().map(|c| c.name.to_string()).collect();
        v.push("num_warps".into());
        v.push("min_blocks".into());
        v.join(", ")
    };
    let decode: Vec<TokenStream> = k
        .constexprs
        .iter()
        .zip(&slots)
        .map(|(c, slot)| {
            let cname = c.name.to_string();
            let tname = c.ty.name();
            let ty = c.ty.rust_ty(Span::call_site());
            let convert = if c.ty == CTy::Bool {
                quote! {
                    match v {
                        0 => false,
                        1 => true,
                        _ => return Err(#err(format!("value {} of `{}` is out of range for bool (use 0 or 1)", v, #cname))),
                    }
                }
            } else {
                quote! {
                    match <#ty as ::core::convert::TryFrom<i64>>::try_from(v) {
                        Ok(x) => x,
                        Err(_) => return Err(#err(format!("value {} of `{}` is out of range for {}", v, #cname, #tname))),
                    }
                }
            };
            let missing = match c.default_expr() {
                Some(d) => quote!(#d),
                None => quote!(return Err(#err(format!("missing value for constexpr `{}` (it has no default)", #cname)))),
            };
            quote! {
                let #slot: #ty = match #slot {
                    Some(v) => #convert,
                    None => #missing,
                };
            }
        })
        .collect();

    // Runtime parameters.
    let p_strs: Vec<LitStr> = k
        .params
        .iter()
        .map(|p| LitStr::new(&p.name.to_string(), p.name.span()))
        .collect();
    let p_dtypes: Vec<TokenStream> = k.params.iter().map(|p| p.dtype()).collect();
    let p_markers: Vec<TokenStream> = k.params.iter().map(|p| p.marker_ty()).collect();
    let p_div: Vec<TokenStream> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.is_int_scalar() {
                quote!(#spec.divisibility_of(#i))
            } else {
                quote!(1u32)
            }
        })
        .collect();
    // Parameters that extents use need not appear in the body.
    let in_extents: Vec<String> = k
        .params
        .iter()
        .filter_map(|p| p.extent.as_ref())
        .flat_map(extent_names)
        .collect();
    let p_bind: Vec<TokenStream> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let n = &p.name;
            let m = &p.mutability;
            let marker = p.marker_ty();
            let allow = if in_extents.contains(&n.to_string()) { quote!(#[allow(unused_variables)]) } else { quote!() };
            quote_spanned!(p.ty_span=> #allow let #m #n = ::replay_dsl::prelude::Tile::<#marker>::from_value(#args[#i]);)
        })
        .collect();
    let c_bind: Vec<TokenStream> = k
        .constexprs
        .iter()
        .map(|c| {
            let n = &c.name;
            let m = &c.mutability;
            let ty = c.ty.rust_ty(c.ty_span);
            let allow = if in_extents.contains(&n.to_string()) {
                quote!(#[allow(unused_variables)])
            } else {
                quote!()
            };
            quote!(#allow let #m #n: #ty = #cfg.#n;)
        })
        .collect();
    let body_tokens = match body {
        Some(b) => {
            let stmts = &b.stmts;
            quote!(#(#stmts)*)
        }
        // The body had errors: keep the bindings (and the user's imports) used.
        None => quote!(let _ = (#(&#c_names,)*); let _ = ::core::marker::PhantomData::<Tile<i32>>;),
    };
    let unused = if body.is_none() {
        quote!(#[allow(unused)])
    } else {
        quote!()
    };

    // Extents.
    let extents: Vec<TokenStream> = k
        .params
        .iter()
        .map(|p| match &p.extent {
            None => quote!(::core::option::Option::None),
            Some(e) => {
                let mut binds = Vec::new();
                for n in extent_names(e) {
                    if let Some((i, rp)) = k.runtime_param(&n) {
                        let id = &rp.name;
                        binds.push(quote!(let #id: i64 = (*#scalars.get(#i)?)?;));
                    } else if let Some(c) = k.constexpr(&n) {
                        let id = &c.name;
                        binds.push(quote!(let #id: i64 = #cfg.#id as i64;));
                    }
                }
                let v = mixed("__replay_extent");
                quote! {
                    (|| -> ::core::option::Option<i64> {
                        #[allow(unused_imports)]
                        use super::*;
                        #(#binds)*
                        let #v: i64 = #e;
                        ::core::option::Option::Some(#v)
                    })()
                    .map(|v| v.max(0) as u64)
                }
            }
        })
        .collect();

    let trace_fn = format_ident!("trace");
    quote! {
        #(#attrs)*
        #vis mod #name {
            #[allow(unused_imports)]
            use ::replay_dsl::prelude::*;

            #[doc = #config_doc]
            #[allow(non_snake_case)]
            #[derive(Clone, Debug, PartialEq, Eq, Hash)]
            pub struct Config {
                #(pub #c_names: #c_tys,)*
                #[doc = #warps_doc]
                pub num_warps: u32,
                #[doc = #blocks_doc]
                pub min_blocks: u32,
            }

            #default_impl

            #[doc = #kernel_doc]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
            pub struct Kernel;

            impl ::replay_dsl::KernelDef for Kernel {
                const NAME: &'static str = #name_str;
                const SOURCE: &'static str = #source;
                type Config = Config;
                type Params = (#(#p_markers,)*);

                fn params() -> ::std::vec::Vec<::replay_dsl::ParamSpec> {
                    ::std::vec![#(::replay_dsl::ParamSpec { name: #p_strs, dtype: #p_dtypes },)*]
                }

                #[allow(non_snake_case, clippy::all)]
                #unused
                fn #trace_fn(
                    #cfg: &Config,
                    #spec: &::replay_dsl::Specialization,
                ) -> ::core::result::Result<::replay_dsl::ir::Kernel, ::replay_dsl::CompileError> {
                    let _ = #spec;
                    ::replay_dsl::front::builder::trace_with_min_blocks(
                        #name_str,
                        ::std::vec![#(::replay_dsl::ir::Param {
                            name: ::std::string::String::from(#p_strs),
                            dtype: #p_dtypes,
                            divisibility: #p_div,
                        },)*],
                        ::std::vec![#((::std::string::String::from(#c_strs), #cfg.#c_names as i64),)*],
                        #cfg.num_warps,
                        #cfg.min_blocks,
                        |#args: &[::replay_dsl::ir::Value]| {
                            #[allow(unused_imports)]
                            use super::*;
                            let _ = #args;
                            #(#p_bind)*
                            #(#c_bind)*
                            #body_tokens
                        },
                    )
                }

                #[allow(non_snake_case, unused_variables, clippy::all)]
                fn extents(#cfg: &Config, #scalars: &[::core::option::Option<i64>]) -> ::std::vec::Vec<::core::option::Option<u64>> {
                    ::std::vec![#(#extents,)*]
                }
            }

            impl ::replay_dsl::ConfigValues for Config {
                fn values(&self) -> ::std::vec::Vec<(&'static str, i64)> {
                    ::std::vec![#(#values,)* ("num_warps", self.num_warps as i64), ("min_blocks", self.min_blocks as i64)]
                }

                #[allow(non_snake_case)]
                fn from_values(values: &[(&str, i64)]) -> ::core::result::Result<Self, ::replay_dsl::CompileError> {
                    let #err = |msg: ::std::string::String| {
                        ::replay_dsl::CompileError::new(#name_str, "config", ::replay_dsl::ErrorKind::Constexpr(msg))
                    };
                    #(let mut #slots: ::core::option::Option<i64> = ::core::option::Option::None;)*
                    let mut #warps_slot: ::core::option::Option<i64> = ::core::option::Option::None;
                    let mut #blocks_slot: ::core::option::Option<i64> = ::core::option::Option::None;
                    for &(name, v) in values {
                        match name {
                            #(#c_strs => #slots = ::core::option::Option::Some(v),)*
                            "num_warps" => #warps_slot = ::core::option::Option::Some(v),
                            "min_blocks" => #blocks_slot = ::core::option::Option::Some(v),
                            other => {
                                return Err(#err(::std::format!(
                                    "unknown constexpr `{}` (expected one of: {})", other, #expected
                                )))
                            }
                        }
                    }
                    #(#decode)*
                    let num_warps: u32 = match #warps_slot {
                        Some(v) => match u32::try_from(v) {
                            Ok(x) => x,
                            Err(_) => return Err(#err(::std::format!("value {} of `num_warps` is out of range for u32", v))),
                        },
                        None => #default_warps,
                    };
                    let min_blocks: u32 = match #blocks_slot {
                        Some(v) => match u32::try_from(v) {
                            Ok(x) if x >= 1 => x,
                            _ => return Err(#err(::std::format!("value {} of `min_blocks` is out of range (≥ 1)", v))),
                        },
                        None => #default_blocks,
                    };
                    Ok(Config { #(#c_names: #slots,)* num_warps, min_blocks })
                }
            }

            #[doc = #trace_doc]
            pub fn trace(config: &Config) -> ::core::result::Result<::replay_dsl::ir::Kernel, ::replay_dsl::CompileError> {
                <Kernel as ::replay_dsl::KernelDef>::trace(config, &::replay_dsl::Specialization::default())
            }

            #[doc = #compile_doc]
            pub fn compile(
                config: &Config,
                target: ::replay_dsl::Target,
            ) -> ::core::result::Result<::replay_dsl::Compiled, ::replay_dsl::CompileError> {
                ::replay_dsl::compile(&trace(config)?, target)
            }
        }
    }
}
