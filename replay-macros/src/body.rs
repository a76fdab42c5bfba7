//! Checks and rewrites a kernel body so that running it traces tile IR.
//!
//! - `a < b` (and `<=`, `>`, `>=`, `==`, `!=`) → `Compare::compare(a, CmpOp::Lt, b)`;
//!   `a && b` / `a || b` → `Logic::and_then(a, || b)` / `Logic::or_else(a, || b)`.
//! - `for pat in range(lo, hi) { … }` / `range_step(lo, hi, step)` → `for_range` with the
//!   variables the body assigns (and does not declare) as carried state.
//! - `if c { … } else { … }` → `Cond::branch` (statement) or `Cond::branch_value` (value),
//!   carrying the variables the arms assign.
//! - errors for `return`, `while`, `loop`, `break`/`continue` out of a runtime loop, shapes
//!   that are not compile-time, literal `arange(N)` operands of different `N`.

use crate::sig::KernelSig;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use std::collections::HashSet;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use syn::{BinOp, Block, Expr, ExprForLoop, ExprIf, Ident, Pat, Stmt};

/// What a body belongs to.
#[derive(Clone, Copy)]
pub enum Context<'a> {
    /// A `#[kernel]`: its parameters explain misuses of runtime values; `return` is an error.
    Kernel(&'a KernelSig),
    /// A `#[kernel_fn]` helper: it returns its tail expression (`return` is an error, since a
    /// runtime `for`/`if` body becomes a closure).
    Helper,
}

/// Rewrites `block` in place; returns the errors found.
pub fn rewrite(ctx: Context<'_>, block: &mut Block) -> Vec<syn::Error> {
    let mut lets = LetNames::default();
    lets.visit_block(block);
    let sig = match ctx {
        Context::Kernel(sig) => Some(sig),
        Context::Helper => None,
    };
    let mut rw = Rewriter {
        sig,
        let_names: lets.0,
        errors: Vec::new(),
        frames: Vec::new(),
        user_closures: 0,
    };
    rw.visit_block_mut(block);
    rw.errors
}

enum Frame {
    /// A loop: `runtime` for `for … in range(…)`.
    Loop { label: Option<String>, runtime: bool },
    /// A labelled block (`'a: { … }`).
    Labeled(String),
    /// A closure written by the user.
    Closure,
}

struct Rewriter<'a> {
    /// The kernel's signature; `None` in a `#[kernel_fn]`.
    sig: Option<&'a KernelSig>,
    /// Every name a `let` (or closure / `for` pattern) binds somewhere in the body.
    let_names: HashSet<String>,
    errors: Vec<syn::Error>,
    frames: Vec<Frame>,
    user_closures: usize,
}

fn mixed(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

fn is_cmp(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Lt(_) => "Lt",
        BinOp::Le(_) => "Le",
        BinOp::Gt(_) => "Gt",
        BinOp::Ge(_) => "Ge",
        BinOp::Eq(_) => "Eq",
        BinOp::Ne(_) => "Ne",
        _ => return None,
    })
}

fn is_elementwise(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::Add(_)
            | BinOp::Sub(_)
            | BinOp::Mul(_)
            | BinOp::Div(_)
            | BinOp::Rem(_)
            | BinOp::BitAnd(_)
            | BinOp::BitOr(_)
            | BinOp::BitXor(_)
            | BinOp::Shl(_)
            | BinOp::Shr(_)
    ) || is_cmp(op).is_some()
}

fn is_compound_assign(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::AddAssign(_)
            | BinOp::SubAssign(_)
            | BinOp::MulAssign(_)
            | BinOp::DivAssign(_)
            | BinOp::RemAssign(_)
            | BinOp::BitXorAssign(_)
            | BinOp::BitAndAssign(_)
            | BinOp::BitOrAssign(_)
            | BinOp::ShlAssign(_)
            | BinOp::ShrAssign(_)
    )
}

/// The last path segment of a call's callee, if it is a plain path.
fn callee_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// `range(lo, hi)` / `range_step(lo, hi, step)`: a runtime loop.
fn runtime_range(f: &ExprForLoop) -> bool {
    match strip(&f.expr) {
        Expr::Call(c) => matches!(callee_name(&c.func).as_deref(), Some("range" | "range_step")),
        _ => false,
    }
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip(&p.expr),
        Expr::Group(g) => strip(&g.expr),
        e => e,
    }
}

/// The shape of an expression when it is visible in the source: literals are scalars,
/// `arange(N)` with a literal `N` has shape `[N]`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LitShape {
    Scalar,
    Vector(u64),
}

fn lit_shape(e: &Expr) -> Option<LitShape> {
    match e {
        Expr::Paren(p) => lit_shape(&p.expr),
        Expr::Group(g) => lit_shape(&g.expr),
        Expr::Lit(l) => matches!(l.lit, syn::Lit::Int(_) | syn::Lit::Float(_)).then_some(LitShape::Scalar),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => lit_shape(&u.expr),
        Expr::Call(c) if callee_name(&c.func).as_deref() == Some("arange") && c.args.len() == 1 => match &c.args[0] {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i), ..
            }) => i.base10_parse().ok().map(LitShape::Vector),
            _ => None,
        },
        Expr::Binary(b) if is_elementwise(&b.op) && is_cmp(&b.op).is_none() => {
            match (lit_shape(&b.left)?, lit_shape(&b.right)?) {
                (LitShape::Scalar, s) | (s, LitShape::Scalar) => Some(s),
                (a, b) if a == b => Some(a),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Names bound by a pattern.
fn pat_names(p: &Pat, out: &mut Vec<String>) {
    struct V<'a>(&'a mut Vec<String>);
    impl<'ast> Visit<'ast> for V<'_> {
        fn visit_pat_ident(&mut self, i: &'ast syn::PatIdent) {
            self.0.push(i.ident.to_string());
            if let Some((_, sub)) = &i.subpat {
                self.visit_pat(sub);
            }
        }
    }
    V(out).visit_pat(p);
}

/// Every name bound by a `let`, closure parameter or `for` pattern in the body.
#[derive(Default)]
struct LetNames(HashSet<String>);
impl<'ast> Visit<'ast> for LetNames {
    fn visit_pat(&mut self, p: &'ast Pat) {
        let mut v = Vec::new();
        pat_names(p, &mut v);
        self.0.extend(v);
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

/// The variables a region assigns that it does not declare itself: the state a runtime loop or
/// branch carries, in order of first assignment.
#[derive(Default)]
struct Assigned {
    scopes: Vec<HashSet<String>>,
    names: Vec<Ident>,
}

impl Assigned {
    fn of_blocks(initial: &[String], blocks: &[&Block]) -> Vec<Ident> {
        let mut a = Assigned {
            scopes: vec![initial.iter().cloned().collect()],
            names: Vec::new(),
        };
        for b in blocks {
            a.visit_block(b);
        }
        a.names
    }
    fn bind(&mut self, p: &Pat) {
        let mut v = Vec::new();
        pat_names(p, &mut v);
        self.scopes.last_mut().expect("scope").extend(v);
    }
    fn assign(&mut self, target: &Expr) {
        if let Expr::Path(p) = strip(target) {
            if let (None, Some(id)) = (&p.qself, p.path.get_ident()) {
                let s = id.to_string();
                let local = self.scopes.iter().any(|sc| sc.contains(&s));
                if !local && !self.names.iter().any(|n| *n == s) {
                    self.names.push(id.clone());
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Assigned {
    fn visit_block(&mut self, b: &'ast Block) {
        self.scopes.push(HashSet::new());
        for s in &b.stmts {
            self.visit_stmt(s);
        }
        self.scopes.pop();
    }
    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, e)) = &init.diverge {
                self.visit_expr(e);
            }
        }
        self.bind(&l.pat);
    }
    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        self.scopes.push(HashSet::new());
        for p in &c.inputs {
            self.bind(p);
        }
        self.visit_expr(&c.body);
        self.scopes.pop();
    }
    fn visit_expr_for_loop(&mut self, f: &'ast ExprForLoop) {
        self.visit_expr(&f.expr);
        self.scopes.push(HashSet::new());
        self.bind(&f.pat);
        self.visit_block(&f.body);
        self.scopes.pop();
    }
    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        self.scopes.push(HashSet::new());
        self.bind(&a.pat);
        if let Some((_, g)) = &a.guard {
            self.visit_expr(g);
        }
        self.visit_expr(&a.body);
        self.scopes.pop();
    }
    fn visit_expr_if(&mut self, i: &'ast ExprIf) {
        self.visit_expr(&i.cond);
        self.scopes.push(HashSet::new());
        let mut lets = Vec::new();
        collect_let_pats(&i.cond, &mut lets);
        for p in lets {
            self.bind(p);
        }
        self.visit_block(&i.then_branch);
        self.scopes.pop();
        if let Some((_, e)) = &i.else_branch {
            self.visit_expr(e);
        }
    }
    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        self.visit_expr(&a.right);
        self.assign(&a.left);
        self.visit_expr(&a.left);
    }
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        self.visit_expr(&b.right);
        if is_compound_assign(&b.op) {
            self.assign(&b.left);
        }
        self.visit_expr(&b.left);
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_macro(&mut self, _: &'ast syn::Macro) {}
}

fn collect_let_pats<'a>(e: &'a Expr, out: &mut Vec<&'a Pat>) {
    match e {
        Expr::Let(l) => out.push(&l.pat),
        Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => {
            collect_let_pats(&b.left, out);
            collect_let_pats(&b.right, out);
        }
        Expr::Paren(p) => collect_let_pats(&p.expr, out),
        _ => {}
    }
}

fn has_let(e: &Expr) -> bool {
    let mut v = Vec::new();
    collect_let_pats(e, &mut v);
    !v.is_empty()
}

/// True if `break`/`continue` inside `blocks` leave them (they would have to cross the
/// closures a branch becomes, so such an `if` stays a plain Rust `if`).
fn escapes(blocks: &[&Block]) -> bool {
    struct V {
        depth: usize,
        labels: Vec<String>,
        found: bool,
    }
    impl V {
        fn jump(&mut self, label: &Option<syn::Lifetime>) {
            match label {
                None => self.found |= self.depth == 0,
                Some(l) => self.found |= !self.labels.contains(&l.ident.to_string()),
            }
        }
        fn with_label(&mut self, label: &Option<syn::Label>, is_loop: bool, f: impl FnOnce(&mut Self)) {
            if let Some(l) = label {
                self.labels.push(l.name.ident.to_string());
            }
            self.depth += is_loop as usize;
            f(self);
            self.depth -= is_loop as usize;
            if label.is_some() {
                self.labels.pop();
            }
        }
    }
    impl<'ast> Visit<'ast> for V {
        fn visit_expr_break(&mut self, b: &'ast syn::ExprBreak) {
            self.jump(&b.label);
            if let Some(e) = &b.expr {
                self.visit_expr(e);
            }
        }
        fn visit_expr_continue(&mut self, c: &'ast syn::ExprContinue) {
            self.jump(&c.label);
        }
        fn visit_expr_for_loop(&mut self, f: &'ast ExprForLoop) {
            self.visit_expr(&f.expr);
            self.with_label(&f.label, true, |s| s.visit_block(&f.body));
        }
        fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
            self.visit_expr(&w.cond);
            self.with_label(&w.label, true, |s| s.visit_block(&w.body));
        }
        fn visit_expr_loop(&mut self, l: &'ast syn::ExprLoop) {
            self.with_label(&l.label, true, |s| s.visit_block(&l.body));
        }
        fn visit_expr_block(&mut self, b: &'ast syn::ExprBlock) {
            self.with_label(&b.label, false, |s| s.visit_block(&b.block));
        }
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut v = V {
        depth: 0,
        labels: Vec::new(),
        found: false,
    };
    for b in blocks {
        v.visit_block(b);
    }
    v.found
}

/// `(a, b,)` from carried names.
fn tuple(names: &[Ident]) -> TokenStream {
    quote!((#(#names,)*))
}

/// `(mut a, mut b,)`.
fn mut_tuple(names: &[Ident]) -> TokenStream {
    quote!((#(mut #names,)*))
}

impl Rewriter<'_> {
    fn error(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.errors.push(syn::Error::new_spanned(tokens, msg));
    }

    /// A closure body that unpacks the state, runs `stmts`, and returns `ret`.
    fn arm_closure(&self, carried: &[Ident], stmts: TokenStream, ret: TokenStream) -> TokenStream {
        let state = mixed("__replay_state");
        if carried.is_empty() {
            quote!(|_: ()| { #stmts #ret })
        } else {
            let pat = mut_tuple(carried);
            quote!(|#state| {
                #[allow(unused_mut)]
                let #pat = #state;
                #stmts
                #ret
            })
        }
    }

    /// `(a, b,) = expr;` as a statement, without `unused_assignments` noise when the carried
    /// values are not read afterwards.
    fn assign_back(carried: &[Ident], value: TokenStream) -> TokenStream {
        let t = tuple(carried);
        quote!(#[allow(unused_assignments)] let () = { #t = #value; };)
    }

    fn check_runtime_jump(&mut self, label: &Option<syn::Lifetime>, tokens: &dyn ToTokens, what: &str) {
        let wanted = label.as_ref().map(|l| l.ident.to_string());
        for f in self.frames.iter().rev() {
            match f {
                Frame::Closure => return,
                Frame::Labeled(l) => {
                    if wanted.as_deref() == Some(l.as_str()) {
                        return;
                    }
                }
                Frame::Loop { label, runtime } => {
                    let matches = wanted.is_none() || wanted == *label;
                    if *runtime {
                        let msg = format!(
                            "`{what}` cannot leave a runtime loop (`for … in range(…)` runs as one traced loop); \
                             use a mask or a runtime `if` instead"
                        );
                        self.errors.push(syn::Error::new_spanned(tokens, msg));
                        return;
                    }
                    if matches {
                        return;
                    }
                }
            }
        }
    }

    /// `for pat in range(…) { body }` → a `for_range` call statement (with its trailing `;`).
    fn runtime_for(&mut self, mut f: ExprForLoop) -> TokenStream {
        let mut initial = Vec::new();
        pat_names(&f.pat, &mut initial);
        let carried = Assigned::of_blocks(&initial, &[&f.body]);
        // Rewrite the bound expressions and the body.
        let mut range = match *f.expr {
            Expr::Call(c) => c,
            other => {
                // `runtime_range` saw a (parenthesised) call.
                match strip(&other).clone() {
                    Expr::Call(c) => c,
                    _ => unreachable!("runtime_range checked the call"),
                }
            }
        };
        for a in range.args.iter_mut() {
            self.visit_expr_mut(a);
        }
        let name = callee_name(&range.func).expect("range callee");
        let fname = Ident::new(&name, range.func.span());
        let args = &range.args;
        let range_call = quote!(::replay_dsl::prelude::#fname(#args));
        self.frames.push(Frame::Loop {
            label: f.label.as_ref().map(|l| l.name.ident.to_string()),
            runtime: true,
        });
        self.visit_block_mut(&mut f.body);
        self.frames.pop();
        let pat = &f.pat;
        let body = &f.body;
        let for_span = f.for_token.span;
        let for_range = quote_spanned!(for_span=> ::replay_dsl::prelude::for_range);
        if carried.is_empty() {
            quote!(#for_range(#range_call, (), |#pat, _: ()| { #body; });)
        } else {
            let state = mixed("__replay_state");
            let pat_state = mut_tuple(&carried);
            let t = tuple(&carried);
            let call = quote!(#for_range(#range_call, #t, |#pat, #state| {
                #[allow(unused_mut)]
                let #pat_state = #state;
                #body;
                #t
            }));
            Self::assign_back(&carried, call)
        }
    }

    /// Whether an `if` stays plain Rust (`if let`, or arms that `break`/`continue` out).
    fn plain_if(i: &ExprIf) -> bool {
        if has_let(&i.cond) {
            return true;
        }
        let mut blocks = vec![&i.then_branch];
        let mut cur = &i.else_branch;
        while let Some((_, e)) = cur {
            match &**e {
                Expr::If(ei) => {
                    if has_let(&ei.cond) {
                        return true;
                    }
                    blocks.push(&ei.then_branch);
                    cur = &ei.else_branch;
                }
                Expr::Block(b) => {
                    blocks.push(&b.block);
                    cur = &None;
                }
                _ => cur = &None,
            }
        }
        escapes(&blocks)
    }

    /// Rewrites the parts of an `if` that stays plain Rust.
    fn visit_plain_if(&mut self, i: &mut ExprIf) {
        self.visit_let_chain(&mut i.cond);
        self.visit_block_mut(&mut i.then_branch);
        if let Some((_, e)) = &mut i.else_branch {
            self.visit_expr_mut(e);
        }
    }

    /// In an `if let … && …` condition, rewrites the operands but keeps the `&&`s.
    fn visit_let_chain(&mut self, e: &mut Expr) {
        match e {
            Expr::Let(l) => self.visit_expr_mut(&mut l.expr),
            Expr::Binary(b) if matches!(b.op, BinOp::And(_)) && has_let(e) => {
                let Expr::Binary(b) = e else { unreachable!() };
                self.visit_let_chain(&mut b.left);
                self.visit_let_chain(&mut b.right);
            }
            Expr::Paren(p) => self.visit_let_chain(&mut p.expr),
            other => self.visit_expr_mut(other),
        }
    }

    /// The `else` part of an `if` as a block (an `else if` becomes a block holding that `if`).
    fn else_block(else_branch: Option<(syn::token::Else, Box<Expr>)>) -> Option<Block> {
        else_branch.map(|(_, e)| match *e {
            Expr::Block(b) if b.label.is_none() && b.attrs.is_empty() => b.block,
            other => syn::parse_quote!({ #other }),
        })
    }

    /// An `if` whose value is not used → a `Cond::branch` statement (with its `;`).
    fn if_statement(&mut self, mut i: ExprIf) -> TokenStream {
        let mut blocks = vec![&i.then_branch];
        let else_block = Self::else_block(i.else_branch.take());
        if let Some(b) = &else_block {
            blocks.push(b);
        }
        let carried = Assigned::of_blocks(&[], &blocks);
        self.visit_expr_mut(&mut i.cond);
        self.visit_block_mut(&mut i.then_branch);
        let mut else_block = else_block;
        if let Some(b) = &mut else_block {
            self.visit_block_mut(b);
        }
        let cond = &i.cond;
        let branch = quote_spanned!(i.if_token.span=> ::replay_dsl::prelude::Cond::branch);
        let t = tuple(&carried);
        let then_block = &i.then_branch;
        let then_c = self.arm_closure(&carried, quote!(#then_block;), t.clone());
        let else_c = match &else_block {
            Some(b) => self.arm_closure(&carried, quote!(#b;), t.clone()),
            None => {
                let s = mixed("__replay_state");
                if carried.is_empty() {
                    quote!(|_: ()| {})
                } else {
                    quote!(|#s| #s)
                }
            }
        };
        if carried.is_empty() {
            quote!(#branch(#cond, (), #then_c, #else_c);)
        } else {
            Self::assign_back(&carried, quote!(#branch(#cond, #t, #then_c, #else_c)))
        }
    }

    /// An `if … else …` whose value is used → a `Cond::branch_value` expression.
    fn if_value(&mut self, mut i: ExprIf) -> Expr {
        let else_block = Self::else_block(i.else_branch.take()).expect("value `if` has an else");
        let carried = Assigned::of_blocks(&[], &[&i.then_branch, &else_block]);
        self.visit_expr_mut(&mut i.cond);
        self.visit_block_mut(&mut i.then_branch);
        let mut else_block = else_block;
        self.visit_block_mut(&mut else_block);
        let cond = &i.cond;
        let branch = quote_spanned!(i.if_token.span=> ::replay_dsl::prelude::Cond::branch_value);
        let t = tuple(&carried);
        let value = mixed("__replay_value");
        let state = mixed("__replay_state");
        let then_block = &i.then_branch;
        let then_c = self.arm_closure(&carried, quote!(let #value = #then_block;), quote!((#t, #value)));
        let else_c = self.arm_closure(&carried, quote!(let #value = #else_block;), quote!((#t, #value)));
        let call = quote!(#branch(#cond, #t, #then_c, #else_c));
        if carried.is_empty() {
            syn::parse_quote!(#call.1)
        } else {
            let back = Self::assign_back(&carried, quote!(#state));
            syn::parse_quote!({
                let (#state, #value) = #call;
                #back
                #value
            })
        }
    }

    /// A tile-shape argument that names a runtime parameter.
    fn check_shape_arg(&mut self, e: &Expr, what: &str) {
        let Expr::Path(p) = strip(e) else { return };
        let Some(id) = p.path.get_ident() else { return };
        let name = id.to_string();
        if self.let_names.contains(&name) {
            return;
        }
        if let Some((_, rp)) = self.sig.and_then(|s| s.runtime_param(&name)) {
            let ty = if rp.ptr { "a pointer" } else { "a runtime scalar" };
            self.error(
                id,
                format!(
                    "`{name}` is {ty} parameter, but {what} must be known at compile time; \
                     declare it `#[constexpr] {name}: usize` (and mask with a runtime bound)"
                ),
            );
        }
    }

    fn check_call(&mut self, c: &syn::ExprCall) {
        match callee_name(&c.func).as_deref() {
            Some("arange") => {
                if let Some(a) = c.args.first() {
                    self.check_shape_arg(a, "the length of `arange`");
                }
            }
            Some("zeros" | "full") => {
                if let Some(Expr::Array(a)) = c.args.first().map(strip) {
                    for e in &a.elems {
                        self.check_shape_arg(e, "tile shapes");
                    }
                }
            }
            _ => {}
        }
    }

    fn check_binary(&mut self, b: &syn::ExprBinary) {
        if is_cmp(&b.op).is_some() {
            for side in [&b.left, &b.right] {
                if let Expr::Binary(inner) = &**side {
                    if is_cmp(&inner.op).is_some() {
                        self.error(
                            b,
                            "comparison operators cannot be chained; compare twice and combine, e.g. `(a < b) && (b < c)`",
                        );
                        return;
                    }
                }
            }
        }
        if is_elementwise(&b.op) {
            if let (Some(LitShape::Vector(x)), Some(LitShape::Vector(y))) = (lit_shape(&b.left), lit_shape(&b.right)) {
                if x != y {
                    let op = b.op.to_token_stream();
                    self.error(
                        b,
                        format!("shape mismatch: the operands of `{op}` have shapes [{x}] and [{y}]; elementwise operands must have equal shapes (or broadcast)"),
                    );
                }
            }
        }
    }
}

impl VisitMut for Rewriter<'_> {
    fn visit_block_mut(&mut self, block: &mut Block) {
        let n = block.stmts.len();
        let stmts = std::mem::take(&mut block.stmts);
        for (idx, stmt) in stmts.into_iter().enumerate() {
            let tail = idx + 1 == n;
            match stmt {
                Stmt::Expr(Expr::If(i), semi) if !Self::plain_if(&i) => {
                    let value_pos = tail && semi.is_none() && i.else_branch.is_some();
                    if value_pos {
                        let e = self.if_value(i);
                        block.stmts.push(Stmt::Expr(e, None));
                    } else {
                        let ts = self.if_statement(i);
                        block.stmts.push(syn::parse2(ts).expect("generated statement parses"));
                    }
                }
                Stmt::Expr(Expr::ForLoop(f), _) if runtime_range(&f) => {
                    let ts = self.runtime_for(f);
                    block.stmts.push(syn::parse2(ts).expect("generated statement parses"));
                }
                Stmt::Item(item) => block.stmts.push(Stmt::Item(item)),
                mut other => {
                    self.visit_stmt_mut(&mut other);
                    block.stmts.push(other);
                }
            }
        }
    }

    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match e {
            Expr::If(i) if !Self::plain_if(i) => {
                let i = i.clone();
                *e = if i.else_branch.is_some() {
                    self.if_value(i)
                } else {
                    let s = self.if_statement(i);
                    syn::parse_quote!({ #s })
                };
            }
            Expr::If(i) => self.visit_plain_if(i),
            Expr::ForLoop(f) if runtime_range(f) => {
                let s = self.runtime_for(f.clone());
                *e = syn::parse_quote!({ #s });
            }
            Expr::ForLoop(f) => {
                // A compile-time loop: plain Rust. Bounds that are runtime parameters get a hint.
                if let Expr::Range(r) = strip(&f.expr) {
                    for bound in [&r.start, &r.end].into_iter().flatten() {
                        if let Expr::Path(p) = strip(bound) {
                            if let Some(id) = p.path.get_ident() {
                                let name = id.to_string();
                                let runtime = self
                                    .sig
                                    .and_then(|s| s.runtime_param(&name))
                                    .is_some_and(|(_, rp)| !rp.ptr);
                                if runtime && !self.let_names.contains(&name) {
                                    self.error(
                                        id,
                                        format!("`{name}` is a runtime value, so `a..b` cannot iterate over it; write `for i in range(lo, {name})` for a runtime loop"),
                                    );
                                }
                            }
                        }
                    }
                }
                self.visit_expr_mut(&mut f.expr);
                self.frames.push(Frame::Loop {
                    label: f.label.as_ref().map(|l| l.name.ident.to_string()),
                    runtime: false,
                });
                self.visit_block_mut(&mut f.body);
                self.frames.pop();
            }
            Expr::While(w) => {
                self.error(
                    w.while_token,
                    "`while` loops are not supported in kernels; use `for i in range(lo, hi)` for runtime loops",
                );
            }
            Expr::Loop(l) => {
                self.error(
                    l.loop_token,
                    "`loop` is not supported in kernels; use `for i in range(lo, hi)` for runtime loops",
                );
            }
            Expr::Return(r) => {
                if self.user_closures == 0 {
                    let msg = match self.sig {
                        Some(_) => "kernels return nothing; write results with `store`",
                        None => "`return` is not supported in a `#[kernel_fn]`; end the body with the returned value",
                    };
                    self.error(&*r, msg);
                }
                if let Some(x) = &mut r.expr {
                    self.visit_expr_mut(x);
                }
            }
            Expr::Break(b) => {
                let b2 = b.clone();
                self.check_runtime_jump(&b2.label, &b2, "break");
                if let Some(x) = &mut b.expr {
                    self.visit_expr_mut(x);
                }
            }
            Expr::Continue(c) => {
                let c2 = c.clone();
                self.check_runtime_jump(&c2.label, &c2, "continue");
            }
            Expr::Async(a) => {
                self.error(a.async_token, "`async` blocks are not supported in kernels");
            }
            Expr::Closure(c) => {
                self.frames.push(Frame::Closure);
                self.user_closures += 1;
                self.visit_expr_mut(&mut c.body);
                self.user_closures -= 1;
                self.frames.pop();
            }
            Expr::Block(b) if b.label.is_some() => {
                let label = b.label.as_ref().map(|l| l.name.ident.to_string()).unwrap_or_default();
                self.frames.push(Frame::Labeled(label));
                self.visit_block_mut(&mut b.block);
                self.frames.pop();
            }
            Expr::Call(c) => {
                let c2 = c.clone();
                self.check_call(&c2);
                syn::visit_mut::visit_expr_call_mut(self, c);
            }
            Expr::Binary(b) => {
                let b2 = b.clone();
                self.check_binary(&b2);
                self.visit_expr_mut(&mut b.left);
                self.visit_expr_mut(&mut b.right);
                let (l, r) = (&b.left, &b.right);
                if let Some(op) = is_cmp(&b.op) {
                    let op = Ident::new(op, Span::call_site());
                    let f = quote_spanned!(b.op.span()=> ::replay_dsl::prelude::Compare::compare);
                    *e = syn::parse_quote!(#f(#l, ::replay_dsl::ir::CmpOp::#op, #r));
                } else if matches!(b.op, BinOp::And(_) | BinOp::Or(_)) {
                    let m = if matches!(b.op, BinOp::And(_)) {
                        "and_then"
                    } else {
                        "or_else"
                    };
                    let m = Ident::new(m, b.op.span());
                    *e = syn::parse_quote!(::replay_dsl::prelude::Logic::#m(#l, || #r));
                }
            }
            _ => syn::visit_mut::visit_expr_mut(self, e),
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
    fn visit_macro_mut(&mut self, _: &mut syn::Macro) {}
}
