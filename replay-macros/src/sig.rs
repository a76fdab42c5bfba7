//! The kernel signature: options, parameters, constexprs, extents.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use std::collections::HashSet;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Attribute, Expr, FnArg, Ident, ItemFn, Lit, Pat, Type, UnOp, Visibility};

/// Element types of pointers and runtime scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F32,
    F16,
    BF16,
    F8E4M3,
    I32,
    I64,
    U32,
    Bool,
}

impl Elem {
    fn from_name(s: &str) -> Option<Elem> {
        Some(match s {
            "f32" => Elem::F32,
            "f16" => Elem::F16,
            "bf16" => Elem::BF16,
            "F8E4M3" => Elem::F8E4M3,
            "i32" => Elem::I32,
            "i64" => Elem::I64,
            "u32" => Elem::U32,
            "bool" => Elem::Bool,
            _ => return None,
        })
    }
    /// The Rust type, as a path that resolves anywhere.
    pub fn rust_ty(self, span: Span) -> TokenStream {
        match self {
            Elem::F32 => quote_spanned!(span=> f32),
            Elem::F16 => quote_spanned!(span=> ::replay_dsl::prelude::f16),
            Elem::BF16 => quote_spanned!(span=> ::replay_dsl::prelude::bf16),
            Elem::F8E4M3 => quote_spanned!(span=> ::replay_dsl::prelude::F8E4M3),
            Elem::I32 => quote_spanned!(span=> i32),
            Elem::I64 => quote_spanned!(span=> i64),
            Elem::U32 => quote_spanned!(span=> u32),
            Elem::Bool => quote_spanned!(span=> bool),
        }
    }
    /// The `replay_dsl::Elem` variant.
    pub fn ir_elem(self) -> TokenStream {
        let v = Ident::new(
            match self {
                Elem::F32 => "F32",
                Elem::F16 => "F16",
                Elem::BF16 => "BF16",
                Elem::F8E4M3 => "F8E4M3",
                Elem::I32 => "I32",
                Elem::I64 => "I64",
                Elem::U32 => "U32",
                Elem::Bool => "Bool",
            },
            Span::call_site(),
        );
        quote!(::replay_dsl::Elem::#v)
    }
    pub fn is_int(self) -> bool {
        matches!(self, Elem::I32 | Elem::I64 | Elem::U32)
    }
}

/// A runtime parameter.
pub struct RtParam {
    pub name: Ident,
    pub mutability: Option<syn::token::Mut>,
    /// Pointer to `elem`, or a scalar `elem`.
    pub ptr: bool,
    pub elem: Elem,
    pub ty_span: Span,
    /// `#[extent(expr)]`.
    pub extent: Option<Expr>,
}

impl RtParam {
    /// The parameter's marker type (`Ptr<f32>`, `i32`, …).
    pub fn marker_ty(&self) -> TokenStream {
        let e = self.elem.rust_ty(self.ty_span);
        if self.ptr {
            quote_spanned!(self.ty_span=> ::replay_dsl::prelude::Ptr<#e>)
        } else {
            e
        }
    }
    pub fn dtype(&self) -> TokenStream {
        let e = self.elem.ir_elem();
        if self.ptr {
            quote!(::replay_dsl::DType::Ptr(#e))
        } else {
            quote!(::replay_dsl::DType::Val(#e))
        }
    }
    pub fn is_int_scalar(&self) -> bool {
        !self.ptr && self.elem.is_int()
    }
}

/// Types a constexpr may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CTy {
    Usize,
    U32,
    I32,
    I64,
    Bool,
}

impl CTy {
    fn from_name(s: &str) -> Option<CTy> {
        Some(match s {
            "usize" => CTy::Usize,
            "u32" => CTy::U32,
            "i32" => CTy::I32,
            "i64" => CTy::I64,
            "bool" => CTy::Bool,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            CTy::Usize => "usize",
            CTy::U32 => "u32",
            CTy::I32 => "i32",
            CTy::I64 => "i64",
            CTy::Bool => "bool",
        }
    }
    /// The range of values the configuration accepts (as `i64`, like `ConfigValues`).
    fn range(self) -> (i128, i128) {
        match self {
            CTy::Usize => (0, i64::MAX as i128),
            CTy::U32 => (0, u32::MAX as i128),
            CTy::I32 => (i32::MIN as i128, i32::MAX as i128),
            CTy::I64 => (i64::MIN as i128, i64::MAX as i128),
            CTy::Bool => (0, 1),
        }
    }
    pub fn rust_ty(self, span: Span) -> TokenStream {
        let id = Ident::new(self.name(), span);
        quote!(#id)
    }
}

/// A `#[constexpr]` parameter.
pub struct Constexpr {
    pub name: Ident,
    pub mutability: Option<syn::token::Mut>,
    pub ty: CTy,
    pub ty_span: Span,
    /// The declared default (bools as 0/1).
    pub default: Option<i128>,
}

impl Constexpr {
    /// The default as a Rust expression of the constexpr's type.
    pub fn default_expr(&self) -> Option<TokenStream> {
        let v = self.default?;
        Some(match self.ty {
            CTy::Bool => {
                if v != 0 {
                    quote!(true)
                } else {
                    quote!(false)
                }
            }
            _ => {
                let lit = proc_macro2::Literal::i128_unsuffixed(v.abs());
                if v < 0 {
                    quote!(-#lit)
                } else {
                    quote!(#lit)
                }
            }
        })
    }
}

/// Everything the generator needs to know about a kernel's signature.
pub struct KernelSig {
    pub vis: Visibility,
    pub name: Ident,
    /// Attributes forwarded to the generated module (docs, `cfg`, lint levels).
    pub attrs: Vec<Attribute>,
    pub params: Vec<RtParam>,
    pub constexprs: Vec<Constexpr>,
}

impl KernelSig {
    pub fn runtime_param(&self, name: &str) -> Option<(usize, &RtParam)> {
        self.params.iter().enumerate().find(|(_, p)| p.name == name)
    }
    pub fn constexpr(&self, name: &str) -> Option<&Constexpr> {
        self.constexprs.iter().find(|c| c.name == name)
    }
}

/// `#[kernel(...)]` options.
pub struct KernelOptions {
    /// `num_warps = N`: the `Config`'s default warps per program (4 when absent).
    pub num_warps: u32,
    /// `min_blocks_per_sm = M`: the `Config`'s default occupancy hint (1, no hint, when absent).
    pub min_blocks: u32,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            num_warps: 4,
            min_blocks: 1,
        }
    }
}

/// Threads one SM holds at once (`replay_dsl::front::builder::MAX_THREADS_PER_SM`).
const MAX_THREADS_PER_SM: u32 = 2048;

/// Parses `#[kernel(num_warps = 8, min_blocks_per_sm = 2)]`; unknown, repeated or invalid
/// options are spanned errors.
pub fn parse_options(attr: TokenStream) -> syn::Result<KernelOptions> {
    let mut options = KernelOptions::default();
    if attr.is_empty() {
        return Ok(options);
    }
    let (mut seen_warps, mut seen_blocks) = (false, false);
    let mut blocks_lit: Option<syn::LitInt> = None;
    let parser = syn::meta::parser(|meta| {
        let name = meta.path.to_token_stream().to_string().replace(' ', "");
        let seen = match name.as_str() {
            "num_warps" => &mut seen_warps,
            "min_blocks_per_sm" => &mut seen_blocks,
            _ => {
                return Err(meta.error(format_args!(
                    "unknown `#[kernel]` option `{name}`; the options are `num_warps = N` and `min_blocks_per_sm = M`"
                )))
            }
        };
        if *seen {
            return Err(meta.error(format_args!("`{name}` is given twice")));
        }
        *seen = true;
        let lit: syn::LitInt = meta.value()?.parse()?;
        let n: u32 = lit.base10_parse()?;
        if name == "num_warps" {
            if !n.is_power_of_two() || n > 32 {
                return Err(syn::Error::new_spanned(
                    &lit,
                    format_args!("`num_warps` must be a power of two ≤ 32, got {n}"),
                ));
            }
            options.num_warps = n;
        } else {
            if n == 0 {
                return Err(syn::Error::new_spanned(
                    &lit,
                    "`min_blocks_per_sm` must be at least 1, got 0",
                ));
            }
            options.min_blocks = n;
            blocks_lit = Some(lit);
        }
        Ok(())
    });
    syn::parse::Parser::parse2(parser, attr)?;
    if let Some(lit) = blocks_lit {
        let threads = options.min_blocks * 32 * options.num_warps;
        if threads > MAX_THREADS_PER_SM {
            return Err(syn::Error::new_spanned(
                &lit,
                format_args!(
                    "`min_blocks_per_sm = {}` programs of {} warps need {threads} threads, more than the \
                     {MAX_THREADS_PER_SM} an SM holds",
                    options.min_blocks, options.num_warps
                ),
            ));
        }
    }
    Ok(options)
}

const SUPPORTED_TYPES: &str = "supported are `Ptr<T>` with T one of f32, f16, bf16, F8E4M3, i32, i64, u32, bool; \
the scalars i32, i64, u32, f32, bool; and `#[constexpr]` parameters of type usize, u32, i32, i64 or bool";

/// Checks the function and collects its parameters. All problems found are combined.
pub fn analyze(func: &ItemFn) -> syn::Result<KernelSig> {
    let mut errors: Vec<syn::Error> = Vec::new();
    let sig = &func.sig;
    let err = |errors: &mut Vec<syn::Error>, tokens: &dyn ToTokens, msg: &str| {
        errors.push(syn::Error::new_spanned(tokens, msg));
    };
    if let Some(c) = &sig.constness {
        err(&mut errors, c, "a kernel cannot be `const`");
    }
    if let Some(a) = &sig.asyncness {
        err(&mut errors, a, "a kernel cannot be `async`");
    }
    if let Some(u) = &sig.unsafety {
        err(&mut errors, u, "a kernel cannot be `unsafe`");
    }
    if let Some(abi) = &sig.abi {
        err(&mut errors, abi, "a kernel cannot declare an ABI");
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        err(
            &mut errors,
            &sig.generics,
            "a kernel cannot be generic; use `#[constexpr]` parameters for compile-time values",
        );
    }
    if let Some(v) = &sig.variadic {
        err(&mut errors, v, "a kernel cannot be variadic");
    }
    if let syn::ReturnType::Type(arrow, ty) = &sig.output {
        errors.push(syn::Error::new(
            arrow.span().join(ty.span()).unwrap_or_else(|| ty.span()),
            "kernels return nothing; write results with `store`",
        ));
    }
    let mut attrs = Vec::new();
    for a in &func.attrs {
        let path = a.path();
        let forwarded = ["doc", "cfg", "allow", "warn", "deny", "forbid", "expect"];
        if forwarded.iter().any(|f| path.is_ident(f)) {
            attrs.push(a.clone());
        } else {
            err(
                &mut errors,
                a,
                "unsupported attribute on a kernel (only doc comments, `cfg` and lint levels are kept)",
            );
        }
    }

    let mut params = Vec::new();
    let mut constexprs = Vec::new();
    let mut seen = HashSet::new();
    let mut extents = Vec::new();
    for arg in &sig.inputs {
        let pt = match arg {
            FnArg::Receiver(r) => {
                err(&mut errors, r, "a kernel takes no `self`");
                continue;
            }
            FnArg::Typed(pt) => pt,
        };
        let (name, mutability) = match &*pt.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => (pi.ident.clone(), pi.mutability),
            other => {
                err(
                    &mut errors,
                    other,
                    "kernel parameters must be plain names (no patterns)",
                );
                continue;
            }
        };
        if !seen.insert(name.to_string()) {
            err(&mut errors, &name, &format!("duplicate parameter `{name}`"));
            continue;
        }
        // Attributes.
        let mut constexpr: Option<(Span, Option<Expr>)> = None;
        let mut extent: Option<Expr> = None;
        let mut attr_ok = true;
        for a in &pt.attrs {
            if a.path().is_ident("constexpr") {
                if constexpr.is_some() {
                    err(&mut errors, a, "duplicate `#[constexpr]`");
                    attr_ok = false;
                    continue;
                }
                match parse_constexpr_attr(a) {
                    Ok(d) => constexpr = Some((a.span(), d)),
                    Err(e) => {
                        // Still a constexpr: check the type, but report nothing more about it.
                        errors.push(e);
                        constexpr = Some((a.span(), None));
                    }
                }
            } else if a.path().is_ident("extent") {
                if extent.is_some() {
                    err(&mut errors, a, "duplicate `#[extent]`");
                    attr_ok = false;
                    continue;
                }
                match a.parse_args::<Expr>() {
                    Ok(e) => extent = Some(e),
                    Err(e) => {
                        errors.push(syn::Error::new(
                            e.span(),
                            format!("malformed `#[extent(expr)]`: {e}; write e.g. `#[extent(n)]` or `#[extent(rows * stride)]`"),
                        ));
                        attr_ok = false;
                    }
                }
            } else {
                err(
                    &mut errors,
                    a,
                    "unknown parameter attribute; a kernel parameter may carry `#[constexpr]`, `#[constexpr(default = value)]` or `#[extent(expr)]`",
                );
                attr_ok = false;
            }
        }
        if let Some((cspan, default)) = constexpr {
            if let Some(e) = &extent {
                err(
                    &mut errors,
                    e,
                    "`#[extent]` applies to pointer parameters, not to constexprs",
                );
            }
            let ty = match simple_type_name(&pt.ty).and_then(|n| CTy::from_name(&n)) {
                Some(t) => t,
                None => {
                    err(
                        &mut errors,
                        &pt.ty,
                        &format!(
                            "unsupported constexpr type `{}`; a `#[constexpr]` is usize, u32, i32, i64 or bool",
                            pt.ty.to_token_stream().to_string().replace(' ', "")
                        ),
                    );
                    continue;
                }
            };
            if name == "num_warps" || name == "min_blocks" {
                err(
                    &mut errors,
                    &name,
                    &format!("`{name}` is reserved: every kernel's `Config` has a `{name}` field"),
                );
                continue;
            }
            let default = match default.map(|d| parse_default(&d, ty)) {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => {
                    errors.push(e);
                    continue;
                }
            };
            let _ = cspan;
            constexprs.push(Constexpr {
                name,
                mutability,
                ty,
                ty_span: pt.ty.span(),
                default,
            });
            continue;
        }
        match param_type(&pt.ty) {
            Some((ptr, elem)) => {
                if let Some(e) = &extent {
                    if !ptr {
                        err(&mut errors, e, "`#[extent]` applies to pointer parameters");
                    } else {
                        extents.push(e.clone());
                    }
                }
                if attr_ok {
                    params.push(RtParam {
                        name,
                        mutability,
                        ptr,
                        elem,
                        ty_span: pt.ty.span(),
                        extent: extent.filter(|_| ptr),
                    });
                }
            }
            None => {
                let shown = pt.ty.to_token_stream().to_string().replace(' ', "");
                let hint = match simple_type_name(&pt.ty).as_deref() {
                    Some("usize") => "; `usize` values are compile-time: add `#[constexpr]`",
                    Some("f16" | "bf16" | "F8E4M3") => "; pass half-precision scalars as f32",
                    _ => "",
                };
                err(
                    &mut errors,
                    &pt.ty,
                    &format!("unsupported parameter type `{shown}`; {SUPPORTED_TYPES}{hint}"),
                );
            }
        }
    }
    let kernel = KernelSig {
        vis: func.vis.clone(),
        name: sig.ident.clone(),
        attrs,
        params,
        constexprs,
    };
    // Extents may use integer scalars, constexprs and literals.
    for e in &extents {
        let mut v = ExtentCheck {
            sig: &kernel,
            errors: Vec::new(),
        };
        v.visit_expr(e);
        errors.extend(v.errors);
    }
    match errors.into_iter().reduce(|mut a, b| {
        a.combine(b);
        a
    }) {
        Some(e) => Err(e),
        None => Ok(kernel),
    }
}

fn parse_constexpr_attr(a: &Attribute) -> syn::Result<Option<Expr>> {
    match &a.meta {
        syn::Meta::Path(_) => Ok(None),
        syn::Meta::List(_) => {
            let mut default = None;
            a.parse_nested_meta(|meta| {
                if meta.path.is_ident("default") {
                    if default.is_some() {
                        return Err(meta.error("duplicate `default`"));
                    }
                    default = Some(meta.value()?.parse::<Expr>()?);
                    Ok(())
                } else {
                    Err(meta.error("unknown `#[constexpr]` option; expected `default = value`"))
                }
            })?;
            Ok(default)
        }
        syn::Meta::NameValue(nv) => Err(syn::Error::new_spanned(
            nv,
            "malformed `#[constexpr]`; write `#[constexpr]` or `#[constexpr(default = value)]`",
        )),
    }
}

/// Parses a constexpr default: an integer literal (optionally negated) or a bool literal.
fn parse_default(e: &Expr, ty: CTy) -> syn::Result<i128> {
    let malformed = || {
        let expected = if ty == CTy::Bool {
            "`true` or `false`"
        } else {
            "an integer literal"
        };
        syn::Error::new_spanned(
            e,
            format!("malformed default for a `{}` constexpr: expected {expected}", ty.name()),
        )
    };
    let (neg, lit) = match e {
        Expr::Lit(l) => (false, &l.lit),
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match &*u.expr {
            Expr::Lit(l) => (true, &l.lit),
            _ => return Err(malformed()),
        },
        Expr::Group(g) => return parse_default(&g.expr, ty),
        _ => return Err(malformed()),
    };
    let v = match (lit, ty) {
        (Lit::Bool(b), CTy::Bool) if !neg => b.value as i128,
        (Lit::Int(i), t) if t != CTy::Bool => {
            if !i.suffix().is_empty() && i.suffix() != t.name() {
                return Err(syn::Error::new_spanned(
                    e,
                    format!(
                        "default `{}` has suffix `{}` but the constexpr is a `{}`",
                        i,
                        i.suffix(),
                        t.name()
                    ),
                ));
            }
            let v: i128 = i.base10_parse().map_err(|_| malformed())?;
            if neg {
                -v
            } else {
                v
            }
        }
        _ => return Err(malformed()),
    };
    let (lo, hi) = ty.range();
    if v < lo || v > hi {
        return Err(syn::Error::new_spanned(
            e,
            format!("default {v} is out of range for `{}`", ty.name()),
        ));
    }
    Ok(v)
}

/// The name of a type that is a single plain identifier (`usize`, `f32`, …).
fn simple_type_name(t: &Type) -> Option<String> {
    match t {
        Type::Path(p) if p.qself.is_none() => {
            let seg = p.path.segments.last()?;
            if !seg.arguments.is_empty() {
                return None;
            }
            Some(seg.ident.to_string())
        }
        Type::Group(g) => simple_type_name(&g.elem),
        Type::Paren(p) => simple_type_name(&p.elem),
        _ => None,
    }
}

/// `Ptr<T>` → `(true, T)`; scalar `T` → `(false, T)`.
fn param_type(t: &Type) -> Option<(bool, Elem)> {
    match t {
        Type::Group(g) => return param_type(&g.elem),
        Type::Paren(p) => return param_type(&p.elem),
        _ => {}
    }
    if let Some(n) = simple_type_name(t) {
        let e = Elem::from_name(&n)?;
        return matches!(e, Elem::I32 | Elem::I64 | Elem::U32 | Elem::F32 | Elem::Bool).then_some((false, e));
    }
    let Type::Path(p) = t else { return None };
    if p.qself.is_some() {
        return None;
    }
    let seg = p.path.segments.last()?;
    if seg.ident != "Ptr" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    if args.args.len() != 1 {
        return None;
    }
    let syn::GenericArgument::Type(inner) = &args.args[0] else {
        return None;
    };
    let e = Elem::from_name(&simple_type_name(inner)?)?;
    Some((true, e))
}

/// Checks the names an `#[extent(...)]` expression uses.
struct ExtentCheck<'a> {
    sig: &'a KernelSig,
    errors: Vec<syn::Error>,
}

impl<'ast> Visit<'ast> for ExtentCheck<'_> {
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        // The callee is a function, not a parameter.
        if !matches!(&*c.func, Expr::Path(_)) {
            self.visit_expr(&c.func);
        }
        for a in &c.args {
            self.visit_expr(a);
        }
    }
    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        let Some(id) = p.path.get_ident() else { return };
        if p.qself.is_some() {
            return;
        }
        let name = id.to_string();
        if self.sig.constexpr(&name).is_some() {
            return;
        }
        match self.sig.runtime_param(&name) {
            Some((_, rp)) if rp.is_int_scalar() => {}
            Some(_) => self.errors.push(syn::Error::new_spanned(
                id,
                format!("`{name}` cannot be used in an extent: extents use integer scalar parameters (i32, i64, u32), constexprs and literals"),
            )),
            None => self.errors.push(syn::Error::new_spanned(
                id,
                format!("`#[extent]` names `{name}`, which is not a parameter of this kernel; extents use integer scalar parameters, constexprs and literals"),
            )),
        }
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.errors
            .push(syn::Error::new_spanned(m, "macros are not supported in `#[extent]`"));
    }
}

/// Identifiers that an `#[extent]` expression names (to bind only those).
pub fn extent_names(e: &Expr) -> Vec<String> {
    struct Names(Vec<String>);
    impl<'ast> Visit<'ast> for Names {
        fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
            for a in &c.args {
                self.visit_expr(a);
            }
        }
        fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
            if let Some(id) = p.path.get_ident() {
                let s = id.to_string();
                if !self.0.contains(&s) {
                    self.0.push(s);
                }
            }
        }
    }
    let mut n = Names(Vec::new());
    n.visit_expr(e);
    n.0
}
