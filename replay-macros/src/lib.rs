//! `#[kernel]`: the attribute that turns a Rust function into a replay tile kernel; and
//! `#[kernel_fn]`, which gives a helper function called from kernels the same body syntax.
//!
//! The macro parses the function with `syn`, checks its signature and body, rewrites the body so
//! that running it *traces* tile IR (comparisons and `&&`/`||` become `Compare`/`Logic` calls,
//! `for i in range(lo, hi)` becomes a runtime loop, every `if` becomes a `Cond` branch), and
//! generates a module named after the function that implements `replay_dsl::KernelDef`.
//!
//! ```ignore
//! use replay_dsl::prelude::*;
//! use replay_macros::kernel;
//!
//! /// out[i] = x[i] + y[i]
//! #[kernel]
//! pub fn add(#[extent(n)] x: Ptr<f32>, #[extent(n)] y: Ptr<f32>, #[extent(n)] out: Ptr<f32>, n: i32,
//!            #[constexpr(default = 1024)] BLOCK: usize) {
//!     let offs = program_id(0) * BLOCK + arange(BLOCK);
//!     let mask = offs < n;
//!     store(out + offs, load(x + offs, mask) + load(y + offs, mask), mask);
//! }
//!
//! let ir = add::trace(&add::Config::default())?;
//! ```
//!
//! `README.md` beside this crate's `Cargo.toml` lists the accepted syntax, the expansion and
//! the errors.

use proc_macro::TokenStream;

mod body;
mod gen;
mod sig;

/// Defines a tile kernel; see the crate documentation.
///
/// Options: `#[kernel(num_warps = 8)]` sets the default `num_warps` of the kernel's `Config`
/// (a power of two ≤ 32; 4 when absent); `#[kernel(min_blocks_per_sm = 2)]` the default
/// `min_blocks`, an occupancy hint emitted as `.minnctapersm` (≥ 1, with that many programs'
/// threads fitting one SM; 1, no hint, when absent). Both are fields of `Config`, so the
/// autotuner can search them.
///
/// Parameters are `Ptr<T>` (T: `f32`, `f16`, `bf16`, `F8E4M3`, `i32`, `i64`, `u32`, `bool`),
/// runtime scalars (`i32`, `i64`, `u32`, `f32`, `bool`), and `#[constexpr]` values (`usize`,
/// `u32`, `i32`, `i64`, `bool`; optionally `#[constexpr(default = 128)]`). A pointer parameter
/// may declare how many elements it may be accessed at with `#[extent(expr)]`, where `expr` is
/// integer arithmetic over the integer scalar parameters and constexprs.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr.into(), item.into()).into()
}

fn expand(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    let source = token_text(item.clone());
    let mut errors = Vec::new();
    let options = sig::parse_options(attr).unwrap_or_else(|e| {
        errors.push(e);
        sig::KernelOptions::default()
    });
    let func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            // rustc parsed the item before calling the macro and has reported chained
            // comparisons already (with a suggestion); do not repeat it.
            if e.to_string() != "comparison operators cannot be chained" {
                errors.push(e);
            }
            return to_errors(errors);
        }
    };
    let kernel = match sig::analyze(&func) {
        Ok(k) => k,
        Err(e) => {
            errors.push(e);
            return to_errors(errors);
        }
    };
    let mut block = (*func.block).clone();
    let body_errors = body::rewrite(body::Context::Kernel(&kernel), &mut block);
    let body_ok = body_errors.is_empty();
    errors.extend(body_errors);
    let module = gen::generate(&kernel, &options, &source, body_ok.then_some(&block));
    let errs = if errors.is_empty() {
        quote::quote!()
    } else {
        to_errors(errors)
    };
    quote::quote!(#errs #module)
}

/// Rewrites a helper function's body with the kernel syntax of `#[kernel]`.
///
/// ```ignore
/// #[kernel_fn]
/// fn decay<T: Float>(h: Tile<T>, a: Tile<T>, steps: Tile<i32>) -> Tile<f32> {
///     let mut s = h.cast::<f32>();
///     let keep = a > h && h > -a;            // elementwise comparisons and `&&`
///     for _ in range(0, steps) {             // a runtime loop carrying `s`
///         s = select(keep, s * 0.5, s);
///     }
///     if steps > 8 { s = s * 0.0; }          // a runtime branch on a scalar tile
///     s
/// }
/// ```
///
/// The body gets the same rewriting as a `#[kernel]` body (comparisons, `&&`/`||`, runtime
/// `for`/`if`), so kernels can share code; the function is otherwise kept as written: generic
/// parameters, any argument and return types, visibility and attributes. It must be called while
/// a kernel is being traced. `return` is not supported (end the body with the returned value);
/// `#[kernel_fn]` takes no options.
#[proc_macro_attribute]
pub fn kernel_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_fn(attr.into(), item.into()).into()
}

fn expand_fn(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    let mut errors = Vec::new();
    if let Some(t) = attr.into_iter().next() {
        errors.push(syn::Error::new_spanned(t, "`#[kernel_fn]` takes no options"));
    }
    let mut func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            if e.to_string() != "comparison operators cannot be chained" {
                errors.push(e);
            }
            return to_errors(errors);
        }
    };
    if let Some(c) = &func.sig.constness {
        errors.push(syn::Error::new_spanned(c, "a `#[kernel_fn]` cannot be `const`"));
    }
    if let Some(a) = &func.sig.asyncness {
        errors.push(syn::Error::new_spanned(a, "a `#[kernel_fn]` cannot be `async`"));
    }
    let body_errors = body::rewrite(body::Context::Helper, &mut func.block);
    if !body_errors.is_empty() {
        // Already reported: keep the signature, so that callers do not add errors.
        errors.extend(body_errors);
        *func.block = syn::parse_quote!({ ::core::unreachable!("the body of this `#[kernel_fn]` has errors") });
        func.attrs.push(syn::parse_quote!(#[allow(unused_variables)]));
    }
    let errs = to_errors(errors);
    quote::quote!(#errs #func)
}

/// The kernel's token text, printed the same way by every compiler version (it is hashed into
/// tuning-cache keys): tokens separated by single spaces, joint punctuation glued.
fn token_text(ts: proc_macro2::TokenStream) -> String {
    use proc_macro2::{Delimiter, Spacing, TokenTree};
    fn go(ts: proc_macro2::TokenStream, out: &mut String) {
        let mut glue = false;
        let mut after_word = false;
        for tt in ts {
            let tight = match &tt {
                TokenTree::Punct(p) => matches!(p.as_char(), ',' | ';' | '.' | '?' | ':'),
                TokenTree::Group(g) => after_word && g.delimiter() != Delimiter::Brace,
                _ => false,
            };
            if !out.is_empty() && !glue && !tight && !out.ends_with(['(', '[', ' ', '.', '#']) {
                out.push(' ');
            }
            glue = false;
            after_word = matches!(&tt, TokenTree::Ident(_) | TokenTree::Group(_));
            match tt {
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::Brace => ("{", "}"),
                        Delimiter::None => ("", ""),
                    };
                    out.push_str(open);
                    let empty = g.stream().is_empty();
                    go(g.stream(), out);
                    if g.delimiter() == Delimiter::Brace && !empty {
                        out.push(' ');
                    }
                    out.push_str(close);
                }
                TokenTree::Ident(i) => out.push_str(&i.to_string()),
                TokenTree::Punct(p) => {
                    out.push(p.as_char());
                    glue = p.spacing() == Spacing::Joint;
                }
                TokenTree::Literal(l) => out.push_str(&l.to_string()),
            }
        }
    }
    let mut out = String::new();
    go(ts, &mut out);
    out
}

fn to_errors(errors: Vec<syn::Error>) -> proc_macro2::TokenStream {
    let mut it = errors.into_iter();
    let Some(mut first) = it.next() else {
        return proc_macro2::TokenStream::new();
    };
    for e in it {
        first.combine(e);
    }
    first.to_compile_error()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn expand_str(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> String {
        expand(attr, item).to_string()
    }

    #[test]
    fn token_text_is_compact_and_stable() {
        let t = token_text(quote!(
            pub fn add(x: Ptr<f32>, n: i32) {
                store(x + arange(4), 1.0, true);
            }
        ));
        assert_eq!(
            t,
            "pub fn add(x: Ptr < f32 >, n: i32) { store(x + arange(4), 1.0, true); }"
        );
    }

    #[test]
    fn expansion_is_a_module_with_the_kernel_items() {
        let out = expand(
            quote!(),
            quote! {
                /// Doc.
                pub fn k(x: Ptr<f32>, n: i32, #[constexpr(default = 64)] BLOCK: usize) {
                    let offs = arange(BLOCK);
                    let mut acc = zeros::<f32>([BLOCK]);
                    for i in range(0, n) {
                        if i < n && offs < n { acc += 1.0; } else { acc = acc * 2.0; }
                    }
                    let v = if BLOCK > 32 { acc } else { acc + 1.0 };
                    store(x + offs, v, offs < n);
                }
            },
        );
        let file: syn::File = syn::parse2(out.clone()).expect("expansion parses");
        let syn::Item::Mod(m) = &file.items[0] else {
            panic!("not a module: {out}")
        };
        assert_eq!(m.ident, "k");
        assert!(matches!(m.vis, syn::Visibility::Public(_)));
        let text = out.to_string();
        for needle in [
            "pub struct Config",
            "impl :: core :: default :: Default for Config",
            "impl :: replay_dsl :: KernelDef for Kernel",
            "impl :: replay_dsl :: ConfigValues for Config",
            ":: replay_dsl :: prelude :: for_range",
            ":: replay_dsl :: prelude :: Cond :: branch",
            ":: replay_dsl :: prelude :: Cond :: branch_value",
            ":: replay_dsl :: prelude :: Compare :: compare",
            ":: replay_dsl :: prelude :: Logic :: and_then",
            ":: replay_dsl :: ir :: CmpOp :: Lt",
            "pub fn trace",
            "pub fn compile",
        ] {
            assert!(text.contains(needle), "missing `{needle}` in {text}");
        }
        assert!(!text.contains("compile_error"), "{text}");
    }

    #[test]
    fn no_default_without_every_default() {
        let text = expand_str(
            quote!(),
            quote!(
                fn k(x: Ptr<f32>, #[constexpr] B: usize) {
                    let _ = x;
                }
            ),
        );
        assert!(!text.contains("Default for Config"), "{text}");
    }

    #[test]
    fn errors_are_compile_errors_not_panics() {
        for item in [
            quote!(
                fn k(x: Ptr<f32>) {
                    return;
                }
            ),
            quote!(
                fn k(x: Ptr<f32>) -> i32 {
                    1
                }
            ),
            quote!(
                fn k(x: Ptr<f32>) {
                    while true {}
                }
            ),
            quote!(
                fn k(x: Ptr<f32>) {
                    loop {}
                }
            ),
            quote!(
                fn k<T>(x: Ptr<T>) {}
            ),
            quote!(
                fn k(self) {}
            ),
            quote!(
                fn k(x: Vec<f32>) {}
            ),
            quote!(
                fn k(#[constexpr] B: f32) {}
            ),
            quote!(
                fn k(#[constexpr(default = 1.5)] B: usize) {}
            ),
            quote!(
                fn k(#[constexpr(default = 300)] B: bool) {}
            ),
            quote!(
                fn k(#[extent(m)] x: Ptr<f32>) {}
            ),
            quote!(
                fn k(n: i32) {
                    for i in range(0, n) {
                        break;
                    }
                }
            ),
            quote!(
                fn k(n: i32) {
                    let a = arange(n);
                }
            ),
            quote!(
                fn k() {
                    let a = arange(64) + arange(128);
                }
            ),
            quote!(
                fn k(n: i32, n: i32) {}
            ),
            quote!(
                fn k(#[constexpr] num_warps: u32) {}
            ),
            quote!(
                fn k(#[constexpr] min_blocks: u32) {}
            ),
            quote!(
                fn k(#[foo] x: i32) {}
            ),
            quote!(
                #[inline]
                fn k() {}
            ),
        ] {
            let text = expand_str(quote!(), item.clone());
            assert!(text.contains("compile_error"), "no error for `{item}`: {text}");
        }
        let text = expand_str(
            quote!(tune(BLOCK = [1, 2])),
            quote!(
                fn k() {}
            ),
        );
        assert!(text.contains("unknown `#[kernel]` option `tune`"), "{text}");
    }

    #[test]
    fn num_warps_option_sets_the_default() {
        let item = quote!(
            fn k(#[constexpr(default = 8)] B: usize) {
                let _ = B;
            }
        );
        let text = expand_str(quote!(num_warps = 8), item.clone());
        assert!(!text.contains("compile_error"), "{text}");
        assert!(text.contains("num_warps : 8u32 , min_blocks : 1u32 }"), "{text}");
        assert!(text.contains("None => 8u32"), "{text}");
        let text = expand_str(quote!(), item.clone());
        assert!(text.contains("num_warps : 4u32 , min_blocks : 1u32 }"), "{text}");
        for (attr, msg) in [
            (quote!(num_warps = 3), "`num_warps` must be a power of two ≤ 32, got 3"),
            (
                quote!(num_warps = 64),
                "`num_warps` must be a power of two ≤ 32, got 64",
            ),
            (quote!(num_warps = 0), "`num_warps` must be a power of two ≤ 32, got 0"),
            (quote!(num_warps = 4, num_warps = 8), "`num_warps` is given twice"),
            (quote!(num_warps = "4"), "expected integer literal"),
            (quote!(num_warps), "expected `=`"),
            (
                quote!(num_warps = 4, tune(B = [1])),
                "unknown `#[kernel]` option `tune`",
            ),
        ] {
            let text = expand_str(attr.clone(), item.clone());
            assert!(text.contains("compile_error"), "no error for `{attr}`: {text}");
            assert!(text.contains(msg), "`{attr}`: want `{msg}` in {text}");
        }
    }

    #[test]
    fn min_blocks_option_sets_the_default() {
        let item = quote!(
            fn k(#[constexpr(default = 8)] B: usize) {
                let _ = B;
            }
        );
        let text = expand_str(quote!(num_warps = 8, min_blocks_per_sm = 2), item.clone());
        assert!(!text.contains("compile_error"), "{text}");
        assert!(text.contains("num_warps : 8u32 , min_blocks : 2u32 }"), "{text}");
        assert!(text.contains("None => 2u32"), "{text}");
        assert!(text.contains("trace_with_min_blocks"), "{text}");
        let text = expand_str(quote!(min_blocks_per_sm = 3), item.clone());
        assert!(text.contains("num_warps : 4u32 , min_blocks : 3u32 }"), "{text}");
        for (attr, msg) in [
            (
                quote!(min_blocks_per_sm = 0),
                "`min_blocks_per_sm` must be at least 1, got 0",
            ),
            (
                quote!(min_blocks_per_sm = 1, min_blocks_per_sm = 2),
                "`min_blocks_per_sm` is given twice",
            ),
            (
                quote!(num_warps = 16, min_blocks_per_sm = 8),
                "`min_blocks_per_sm = 8` programs of 16 warps need 4096 threads",
            ),
            (quote!(min_blocks = 2), "unknown `#[kernel]` option `min_blocks`"),
        ] {
            let text = expand_str(attr.clone(), item.clone());
            assert!(text.contains("compile_error"), "no error for `{attr}`: {text}");
            assert!(text.contains(msg), "`{attr}`: want `{msg}` in {text}");
        }
    }

    #[test]
    fn kernel_fn_rewrites_the_body_and_keeps_the_signature() {
        let out = expand_fn(
            quote!(),
            quote!(
                /// Doc.
                pub(crate) fn f<T: Float>(h: Tile<T>, n: Tile<i32>) -> Tile<f32> {
                    let mut s = h.cast::<f32>();
                    for _ in range(0, n) {
                        if n > 2 && s < 1.0 {
                            s = s + 1.0;
                        }
                    }
                    s
                }
            ),
        );
        let func: syn::ItemFn = syn::parse2(out.clone()).expect("expansion is a fn");
        assert_eq!(func.sig.ident, "f");
        assert_eq!(func.sig.generics.params.len(), 1);
        assert!(matches!(func.vis, syn::Visibility::Restricted(_)));
        assert_eq!(func.attrs.len(), 1);
        let text = out.to_string();
        for needle in [
            ":: replay_dsl :: prelude :: for_range",
            ":: replay_dsl :: prelude :: Cond :: branch",
            ":: replay_dsl :: prelude :: Compare :: compare",
            ":: replay_dsl :: prelude :: Logic :: and_then",
        ] {
            assert!(text.contains(needle), "missing `{needle}` in {text}");
        }
        assert!(!text.contains("compile_error"), "{text}");
    }

    #[test]
    fn kernel_fn_errors() {
        for (attr, item, msg) in [
            (
                quote!(),
                quote!(
                    fn f(x: Tile<f32>) -> Tile<f32> {
                        return x;
                    }
                ),
                "`return` is not supported in a `#[kernel_fn]`",
            ),
            (
                quote!(),
                quote!(
                    fn f(n: Tile<i32>) {
                        for i in range(0, n) {
                            break;
                        }
                    }
                ),
                "`break` cannot leave a runtime loop",
            ),
            (
                quote!(),
                quote!(
                    const fn f() {}
                ),
                "a `#[kernel_fn]` cannot be `const`",
            ),
            (
                quote!(),
                quote!(
                    async fn f() {}
                ),
                "a `#[kernel_fn]` cannot be `async`",
            ),
            (
                quote!(inline),
                quote!(
                    fn f() {}
                ),
                "`#[kernel_fn]` takes no options",
            ),
        ] {
            let text = expand_fn(attr, item.clone()).to_string();
            assert!(text.contains(msg), "`{item}`: want `{msg}` in {text}");
        }
        // A body with errors keeps the signature and drops the body.
        let text = expand_fn(
            quote!(),
            quote!(
                fn f(x: Tile<f32>) -> Tile<f32> {
                    while true {}
                    x
                }
            ),
        )
        .to_string();
        assert!(text.contains("unreachable"), "{text}");
    }

    #[test]
    fn plain_rust_stays_plain() {
        // `if let`, compile-time loops with `break`, and closures with `return` are kept.
        let text = expand_str(
            quote!(),
            quote!(
                fn k(#[constexpr] N: usize) {
                    let f = |x: usize| {
                        return x + 1;
                    };
                    for i in 0..N {
                        if i == 2 {
                            break;
                        }
                    }
                    if let Some(v) = Some(f(N)) {
                        static_assert(v > 0, "v");
                    }
                }
            ),
        );
        assert!(!text.contains("compile_error"), "{text}");
        assert!(!text.contains("Cond :: branch"), "{text}");
    }

    #[test]
    fn carried_state_is_what_the_body_assigns() {
        let text = expand_str(
            quote!(),
            quote!(
                fn k(n: i32) {
                    let mut a = constant(0i32);
                    let mut b = constant(0i32);
                    let c = constant(1i32);
                    for i in range(0, n) {
                        let mut t = c;
                        t += 1;
                        a += t;
                        b = b + i;
                    }
                    let _ = (a, b);
                }
            ),
        );
        assert!(
            text.contains("(a , b ,) = :: replay_dsl :: prelude :: for_range"),
            "{text}"
        );
    }
}
