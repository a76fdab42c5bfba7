//! Shared-memory buffers filled by asynchronous copies: a tile of global memory is copied into a
//! stage of a buffer while the program computes, waited for, then read as a tile (the
//! double-buffered loops of Triton's software pipelining, written out).

use super::builder::{declare_shared, fail, push, push1, set_overlay, shared_buffer, ty};
use super::ops::{mask_for, MaskArg};
use super::tile::{Operand, Ptr, Scalar, Tile};
use crate::error::ErrorKind;
use crate::ir::{Op, SharedBuffer};
use crate::types::Ty;
use std::marker::PhantomData;

/// A buffer in shared memory of `stages` tiles of `T` (see [`shared`]).
#[derive(Clone, Copy, Debug)]
pub struct Shared<T: Scalar> {
    id: usize,
    _elem: PhantomData<T>,
}

/// Declares a shared-memory buffer of `stages` tiles of shape `shape`, written by
/// [`Shared::copy_async`] and read by [`Shared::read`].
#[track_caller]
pub fn shared<T: Scalar>(stages: usize, shape: &[usize]) -> Shared<T> {
    if stages == 0 || shape.is_empty() {
        fail(
            "shared",
            ErrorKind::Shape(format!(
                "a shared buffer needs ≥ 1 stage and a shape, got {stages} × {shape:?}"
            )),
        );
    }
    let id = declare_shared(SharedBuffer {
        dtype: T::DTYPE,
        shape: shape.to_vec(),
        stages: stages.max(1),
        overlays: None,
    });
    Shared { id, _elem: PhantomData }
}

/// The scalar `stage` as a value (an error unless it is a scalar).
#[track_caller]
fn stage_value(stage: impl Operand<i32>, op: &str) -> crate::ir::Value {
    let v = stage.value();
    if !ty(v).shape.is_empty() {
        fail(
            op,
            ErrorKind::Shape(format!("the stage must be a scalar, got {:?}", ty(v).shape)),
        );
    }
    v
}

impl<T: Scalar> Shared<T> {
    /// A buffer of `stages` tiles of `shape` in the same bytes as this one (their region as
    /// large as the larger of the two), for code paths that use one or the other: a tail tile
    /// of its own shape beside the main loop's, without more shared memory. A copy into either
    /// overwrites what the other holds (the interpreter forgets the other's stages, so that
    /// reading them is an error).
    #[track_caller]
    pub fn overlay(&self, stages: usize, shape: &[usize]) -> Shared<T> {
        let over = shared::<T>(stages, shape);
        let region = shared_buffer(self.id).region(self.id);
        set_overlay(over.id, region);
        over
    }

    /// Starts copying the memory behind `ptr` (the shape of one stage) into stage `stage`, as
    /// one copy group that completes in the background; lanes where `mask` is false become 0
    /// and are not read. The copy begins after every earlier [`Shared::read`] of this buffer by
    /// the program, and its data may be read after a [`wait_async`] has completed it.
    #[track_caller]
    pub fn copy_async(&self, stage: impl Operand<i32>, ptr: Tile<Ptr<T>>, mask: impl MaskArg) {
        let (p, m) = mask_for(ptr.value, mask.mask(), "copy_async");
        let want = shared_buffer(self.id).shape;
        let got = ty(p).shape;
        if got != want {
            fail(
                "copy_async",
                ErrorKind::Shape(format!("a {got:?} pointer tile copied into a stage of shape {want:?}")),
            );
        }
        let stage = stage_value(stage, "copy_async");
        push(
            Op::CopyAsync {
                buffer: self.id,
                stage,
                ptr: p,
                mask: m,
            },
            vec![],
        );
    }

    /// Stage `stage` as a tile. Its copy must have completed ([`wait_async`]). A read that
    /// only feeds an operand of a tensor-core `dot` on tf32 (itself or its cast to f32), later
    /// in the same block with no copy into the buffer in between, is not loaded into registers:
    /// the dot reads its fragments from the buffer.
    #[track_caller]
    pub fn read(&self, stage: impl Operand<i32>) -> Tile<T> {
        let b = shared_buffer(self.id);
        let stage = stage_value(stage, "shared read");
        Tile::from_value(push1(
            Op::SharedRead { buffer: self.id, stage },
            Ty::new(T::DTYPE, b.shape),
        ))
    }
}

/// Waits until at most `pending` of the program's copy groups ([`Shared::copy_async`]) are still
/// in flight, the newest ones; the completed copies are then visible to the whole program.
#[track_caller]
pub fn wait_async(pending: usize) {
    push(Op::WaitAsync(pending), vec![]);
}
