//! Shared-memory planning: every use (layout conversion, cross-warp reduction or scan, dot
//! staging) starts at offset 0 of the staging scratch, sized to the largest use (after the
//! kernel's shared buffers in the one `.shared .align 16` array), and is bracketed as
//! `bar.sync 0; write; bar.sync 0; read`. The first barrier is omitted while no earlier use can
//! still be reading (straight-line code before the first use).

/// The most static shared memory a kernel may declare; the staging scratch of one use stays
/// within it. A kernel needing more (its shared buffers) declares its array `.extern` and is
/// launched with that much dynamic shared memory.
pub const STATIC_LIMIT: usize = 48 * 1024;

/// The most shared memory a program may use on the supported targets (227 KiB, opted into as
/// dynamic shared memory).
pub const LIMIT: usize = 227 * 1024;

/// The state of shared-memory use while emitting a kernel.
#[derive(Clone, Debug, Default)]
pub struct SmemPlan {
    bytes: usize,
    dirty: bool,
}

impl SmemPlan {
    /// Starts a use of `bytes` bytes; returns true if a barrier must precede its writes.
    pub fn begin(&mut self, bytes: usize) -> bool {
        self.bytes = self.bytes.max(bytes);
        std::mem::replace(&mut self.dirty, true)
    }
    /// The size of the array: the largest use, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// True if an earlier use may still be reading.
    pub fn dirty(&self) -> bool {
        self.dirty
    }
    /// Sets whether an earlier use may still be reading (loop heads and branch joins).
    pub fn set_dirty(&mut self, dirty: bool) {
        self.dirty = dirty;
    }
}
