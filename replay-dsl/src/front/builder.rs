//! The tracing context: kernel bodies run as ordinary Rust and append IR here.

use crate::error::{CompileError, ErrorKind};
use crate::ir::{Block, Inst, Kernel, Loc, Op, Param, SharedBuffer, Value};
use crate::types::Ty;
use std::cell::RefCell;

struct Ctx {
    kernel: Kernel,
    /// Open blocks; the last one receives new instructions.
    blocks: Vec<Block>,
    /// The first error met while tracing; later ops still trace on placeholder values.
    error: Option<CompileError>,
}

thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

/// Threads one SM holds at once on every supported target (`sm_90a`, `sm_100a`).
pub const MAX_THREADS_PER_SM: u32 = 2048;

/// Traces a kernel body into IR. `body` receives one value per parameter.
///
/// Errors met inside the body (shape mismatches, failed static asserts, …) are collected and the
/// first one is returned, naming the kernel and the op.
pub fn trace(
    name: &str,
    params: Vec<Param>,
    constexprs: Vec<(String, i64)>,
    num_warps: u32,
    body: impl FnOnce(&[Value]),
) -> Result<Kernel, CompileError> {
    trace_with_min_blocks(name, params, constexprs, num_warps, 1, body)
}

/// [`trace`] with an occupancy hint: `min_blocks` programs of `32 × num_warps` threads should
/// fit on one SM at once (`.minnctapersm`; 1 is no hint). It must be at least 1 and the
/// programs must fit [`MAX_THREADS_PER_SM`].
pub fn trace_with_min_blocks(
    name: &str,
    params: Vec<Param>,
    constexprs: Vec<(String, i64)>,
    num_warps: u32,
    min_blocks: u32,
    body: impl FnOnce(&[Value]),
) -> Result<Kernel, CompileError> {
    if !num_warps.is_power_of_two() || num_warps > 32 {
        return Err(CompileError::new(
            name,
            "num_warps",
            ErrorKind::Constexpr(format!("num_warps must be a power of two ≤ 32, got {num_warps}")),
        ));
    }
    if min_blocks == 0 || min_blocks * 32 * num_warps > MAX_THREADS_PER_SM {
        return Err(CompileError::new(
            name,
            "min_blocks",
            ErrorKind::Constexpr(format!(
                "min_blocks must be ≥ 1 with min_blocks × 32 × num_warps ≤ {MAX_THREADS_PER_SM}, got {min_blocks} \
                 programs of {num_warps} warps"
            )),
        ));
    }
    let kernel = Kernel {
        name: name.to_string(),
        params: params.clone(),
        constexprs,
        num_warps,
        min_blocks,
        values: Vec::new(),
        shared: Vec::new(),
        body: Block::default(),
    };
    let previous = CTX.with(|c| {
        c.replace(Some(Ctx {
            kernel,
            blocks: vec![Block::default()],
            error: None,
        }))
    });
    assert!(
        previous.is_none(),
        "replay: kernels cannot be traced inside another kernel's trace"
    );
    let args: Vec<Value> = params
        .iter()
        .enumerate()
        .map(|(i, p)| push_at(Op::Param(i), vec![Ty::scalar(p.dtype)], None)[0])
        .collect();
    // Run the body; make sure the context is removed even if the body panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CTX.with(|c| c.replace(None));
        }
    }
    let reset = Reset;
    body(&args);
    let ctx = CTX.with(|c| c.borrow_mut().take()).expect("trace context present");
    drop(reset);
    if let Some(e) = ctx.error {
        return Err(e);
    }
    let mut kernel = ctx.kernel;
    let mut blocks = ctx.blocks;
    debug_assert_eq!(blocks.len(), 1);
    kernel.body = blocks.pop().expect("top block");
    Ok(kernel)
}

fn with<R>(f: impl FnOnce(&mut Ctx) -> R) -> R {
    CTX.with(|c| {
        let mut c = c.borrow_mut();
        let ctx = c
            .as_mut()
            .expect("replay: tile operations can only run while a #[kernel] is traced");
        f(ctx)
    })
}

/// True while a kernel is being traced on this thread.
pub fn is_tracing() -> bool {
    CTX.with(|c| c.borrow().is_some())
}

/// Appends an instruction to the current block and returns its results. The instruction's
/// location is its caller's, through every `#[track_caller]` function up to the kernel source.
#[track_caller]
pub fn push(op: Op, result_tys: Vec<Ty>) -> Vec<Value> {
    push_at(op, result_tys, Some(Loc::caller()))
}

/// [`push`] with the given location (none for instructions that no source line stands for:
/// parameters, the ends of nested blocks).
pub fn push_at(op: Op, result_tys: Vec<Ty>, loc: Option<Loc>) -> Vec<Value> {
    with(|ctx| {
        let results: Vec<Value> = result_tys.into_iter().map(|t| ctx.kernel.new_value(t)).collect();
        ctx.blocks.last_mut().expect("open block").insts.push(Inst {
            op,
            results: results.clone(),
            loc,
        });
        results
    })
}

/// Appends a single-result instruction.
#[track_caller]
pub fn push1(op: Op, ty: Ty) -> Value {
    push(op, vec![ty])[0]
}

/// Defines a value without an instruction (a block argument).
pub fn new_value(ty: Ty) -> Value {
    with(|ctx| ctx.kernel.new_value(ty))
}

/// The type of a traced value.
pub fn ty(v: Value) -> Ty {
    with(|ctx| ctx.kernel.ty(v).clone())
}

/// Records an error (the first one wins); tracing continues.
pub fn fail(op: &str, kind: ErrorKind) {
    with(|ctx| {
        if ctx.error.is_none() {
            ctx.error = Some(CompileError::new(ctx.kernel.name.clone(), op, kind));
        }
    })
}

/// True if an error was recorded.
pub fn failed() -> bool {
    with(|ctx| ctx.error.is_some())
}

/// Declares a shared-memory buffer of the kernel being traced; returns its index.
pub fn declare_shared(buffer: SharedBuffer) -> usize {
    with(|ctx| {
        ctx.kernel.shared.push(buffer);
        ctx.kernel.shared.len() - 1
    })
}

/// Makes shared buffer `id` of the kernel being traced share the bytes of buffer `region`.
pub fn set_overlay(id: usize, region: usize) {
    with(|ctx| ctx.kernel.shared[id].overlays = Some(region))
}

/// The shared-memory buffer `id` of the kernel being traced.
pub fn shared_buffer(id: usize) -> SharedBuffer {
    with(|ctx| ctx.kernel.shared[id].clone())
}

/// The number of warps of the kernel being traced.
pub fn num_warps() -> u32 {
    with(|ctx| ctx.kernel.num_warps)
}

/// Opens a nested block whose instructions go to the block returned by [`close_block`].
pub fn open_block(args: Vec<Value>) {
    with(|ctx| {
        ctx.blocks.push(Block {
            args,
            insts: Vec::new(),
        })
    })
}

/// Closes the innermost nested block.
pub fn close_block() -> Block {
    with(|ctx| {
        assert!(ctx.blocks.len() > 1, "close_block without open_block");
        ctx.blocks.pop().expect("nested block")
    })
}
