//! Runtime control flow: loops with loop-carried tiles and branches on scalar conditions.
//!
//! The `#[kernel]` macro rewrites `for i in range(lo, hi) { … }` into [`for_range`] and every
//! `if` into [`Cond::branch`]; the variables a loop or branch assigns travel as [`Carry`] state.

use super::builder::{close_block, fail, new_value, open_block, push, push_at, ty};
use super::tile::{Element, Operand, Tile};
use crate::error::ErrorKind;
use crate::ir::{Op, Value};
use crate::types::Ty;

/// State that runtime control flow can carry: tiles, tuples of carried values, and `()`.
pub trait Carry: Sized {
    /// Appends the traced values of this state.
    fn flatten(&self, out: &mut Vec<Value>);
    /// Rebuilds the state from values of the same types, in `flatten` order.
    fn rebuild(&self, vals: &mut dyn Iterator<Item = Value>) -> Self;
}

impl<T: Element> Carry for Tile<T> {
    #[track_caller]
    fn flatten(&self, out: &mut Vec<Value>) {
        out.push(self.value)
    }
    #[track_caller]
    fn rebuild(&self, vals: &mut dyn Iterator<Item = Value>) -> Self {
        Tile::from_value(vals.next().expect("carried value"))
    }
}

/// Plain Rust values can be branch state of compile-time `if`s; carrying one through a runtime
/// loop or branch is a compile error (its value cannot change at run time).
macro_rules! carry_plain {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            #[track_caller]
            fn flatten(&self, _: &mut Vec<Value>) {
                fail("carry", ErrorKind::Type(format!(
                    "a compile-time `{}` is assigned inside a runtime loop or branch; use a tile",
                    stringify!($t)
                )));
            }
            #[track_caller]
            fn rebuild(&self, _: &mut dyn Iterator<Item = Value>) -> Self {
                *self
            }
        }
    )*};
}
carry_plain!(usize, isize, u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, bool);

impl Carry for () {
    #[track_caller]
    fn flatten(&self, _: &mut Vec<Value>) {}
    #[track_caller]
    fn rebuild(&self, _: &mut dyn Iterator<Item = Value>) -> Self {}
}

/// An optional carried value whose presence is fixed at compile time (a kernel option): `None`
/// carries nothing.
impl<A: Carry> Carry for Option<A> {
    #[track_caller]
    fn flatten(&self, out: &mut Vec<Value>) {
        if let Some(a) = self {
            a.flatten(out)
        }
    }
    #[track_caller]
    fn rebuild(&self, vals: &mut dyn Iterator<Item = Value>) -> Self {
        self.as_ref().map(|a| a.rebuild(vals))
    }
}

macro_rules! carry_tuple {
    ($($n:ident $i:tt),*) => {
        impl<$($n: Carry),*> Carry for ($($n,)*) {
            #[track_caller]
            fn flatten(&self, out: &mut Vec<Value>) {
                $(self.$i.flatten(out);)*
            }
            #[track_caller]
            fn rebuild(&self, vals: &mut dyn Iterator<Item = Value>) -> Self {
                ($(self.$i.rebuild(vals),)*)
            }
        }
    };
}
carry_tuple!(A 0);
carry_tuple!(A 0, B 1);
carry_tuple!(A 0, B 1, C 2);
carry_tuple!(A 0, B 1, C 2, D 3);
carry_tuple!(A 0, B 1, C 2, D 3, E 4);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

#[track_caller]
fn flat<C: Carry>(c: &C) -> Vec<Value> {
    let mut v = Vec::new();
    c.flatten(&mut v);
    v
}

#[track_caller]
fn check_same_types(op: &str, before: &[Value], after: &[Value]) -> bool {
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        let (ta, tb) = (ty(*a), ty(*b));
        if ta != tb {
            fail(
                op,
                ErrorKind::Type(format!("carried value #{i} changes type from {ta} to {tb}")),
            );
            return false;
        }
    }
    true
}

/// A runtime `i32` range `lo..hi` stepping by `step`, for `for i in range(lo, hi)` loops.
pub struct Range {
    lo: Value,
    hi: Value,
    step: Value,
}

/// The runtime range `lo..hi` (step 1).
#[track_caller]
pub fn range(lo: impl Operand<i32>, hi: impl Operand<i32>) -> Range {
    range_step(lo, hi, 1)
}

/// The runtime range `lo..hi` stepping by `step` (which must be positive).
#[track_caller]
pub fn range_step(lo: impl Operand<i32>, hi: impl Operand<i32>, step: impl Operand<i32>) -> Range {
    let r = Range {
        lo: lo.value(),
        hi: hi.value(),
        step: step.value(),
    };
    for v in [r.lo, r.hi, r.step] {
        if !ty(v).shape.is_empty() {
            fail(
                "for",
                ErrorKind::Shape(format!("loop bounds must be scalars, got shape {:?}", ty(v).shape)),
            );
        }
    }
    r
}

/// Traces a runtime loop: `body(i, state)` returns the next state; returns the final state.
#[track_caller]
pub fn for_range<C: Carry>(range: Range, init: C, body: impl FnOnce(Tile<i32>, C) -> C) -> C {
    let init_vals = flat(&init);
    let iv = new_value(Ty::scalar(i32::DTYPE));
    let args: Vec<Value> = init_vals.iter().map(|v| new_value(ty(*v))).collect();
    let mut all_args = vec![iv];
    all_args.extend(&args);
    open_block(all_args);
    let state = init.rebuild(&mut args.clone().into_iter());
    let next = body(Tile::from_value(iv), state);
    let next_vals = flat(&next);
    check_same_types("for", &init_vals, &next_vals);
    push_at(Op::Yield(next_vals), vec![], None);
    let block = close_block();
    let result_tys: Vec<Ty> = init_vals.iter().map(|v| ty(*v)).collect();
    let results = push(
        Op::For {
            lo: range.lo,
            hi: range.hi,
            step: range.step,
            init: init_vals,
            body: block,
        },
        result_tys,
    );
    init.rebuild(&mut results.into_iter())
}

/// A branch condition: `bool` branches while tracing (compile time), a bool scalar tile
/// branches at run time.
pub trait Cond {
    /// Runs (or traces) `then_` or `else_` on `state` and returns the resulting state.
    fn branch<C: Carry>(self, state: C, then_: impl FnOnce(C) -> C, else_: impl FnOnce(C) -> C) -> C;
    /// Like [`Cond::branch`] for an `if` used as a value: each arm returns the state and a
    /// value (of the same type in both arms); returns the resulting state and value.
    #[track_caller]
    fn branch_value<C: Carry, V: Carry>(
        self,
        state: C,
        then_: impl FnOnce(C) -> (C, V),
        else_: impl FnOnce(C) -> (C, V),
    ) -> (C, V);
}

impl Cond for bool {
    #[track_caller]
    fn branch<C: Carry>(self, state: C, then_: impl FnOnce(C) -> C, else_: impl FnOnce(C) -> C) -> C {
        if self {
            then_(state)
        } else {
            else_(state)
        }
    }
    #[track_caller]
    fn branch_value<C: Carry, V: Carry>(
        self,
        state: C,
        then_: impl FnOnce(C) -> (C, V),
        else_: impl FnOnce(C) -> (C, V),
    ) -> (C, V) {
        if self {
            then_(state)
        } else {
            else_(state)
        }
    }
}

impl Cond for Tile<bool> {
    #[track_caller]
    fn branch<C: Carry>(self, state: C, then_: impl FnOnce(C) -> C, else_: impl FnOnce(C) -> C) -> C {
        if !self.shape().is_empty() {
            fail(
                "if",
                ErrorKind::Shape(format!(
                    "a runtime `if` needs a scalar condition, got shape {:?}",
                    self.shape()
                )),
            );
        }
        let init_vals = flat(&state);
        let trace_arm = |arm: Box<dyn FnOnce(C) -> C + '_>, state: &C| {
            open_block(vec![]);
            let out = arm(state.rebuild(&mut init_vals.clone().into_iter()));
            let vals = flat(&out);
            check_same_types("if", &init_vals, &vals);
            push_at(Op::Yield(vals), vec![], None);
            close_block()
        };
        let then_block = trace_arm(Box::new(then_), &state);
        let else_block = trace_arm(Box::new(else_), &state);
        let tys: Vec<Ty> = init_vals.iter().map(|v| ty(*v)).collect();
        let results = push(
            Op::If {
                cond: self.value,
                then_block,
                else_block,
            },
            tys,
        );
        state.rebuild(&mut results.into_iter())
    }
    #[track_caller]
    fn branch_value<C: Carry, V: Carry>(
        self,
        state: C,
        then_: impl FnOnce(C) -> (C, V),
        else_: impl FnOnce(C) -> (C, V),
    ) -> (C, V) {
        if !self.shape().is_empty() {
            fail(
                "if",
                ErrorKind::Shape(format!(
                    "a runtime `if` needs a scalar condition, got shape {:?}",
                    self.shape()
                )),
            );
        }
        let init_vals = flat(&state);
        // The then arm fixes the value's types; the else arm must yield the same ones.
        open_block(vec![]);
        let (then_state, then_value) = then_(state.rebuild(&mut init_vals.clone().into_iter()));
        let mut then_vals = flat(&then_state);
        check_same_types("if", &init_vals, &then_vals);
        then_vals.extend(flat(&then_value));
        push_at(Op::Yield(then_vals.clone()), vec![], None);
        let then_block = close_block();
        open_block(vec![]);
        let else_vals = flat(&else_(state.rebuild(&mut init_vals.clone().into_iter())));
        if else_vals.len() != then_vals.len() {
            fail(
                "if",
                ErrorKind::Type("the arms of an `if` yield values of different types".into()),
            );
        } else {
            check_same_types("if", &then_vals, &else_vals);
        }
        push_at(Op::Yield(else_vals), vec![], None);
        let else_block = close_block();
        let tys: Vec<Ty> = then_vals.iter().map(|v| ty(*v)).collect();
        let results = push(
            Op::If {
                cond: self.value,
                then_block,
                else_block,
            },
            tys,
        );
        let mut it = results.into_iter();
        let state = state.rebuild(&mut it);
        let value = then_value.rebuild(&mut it);
        (state, value)
    }
}
