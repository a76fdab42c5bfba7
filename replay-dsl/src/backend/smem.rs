//! Shared-memory planning: every use (layout conversion, cross-warp reduction or scan, dot
//! staging) writes its range of the staging scratch (after the kernel's shared buffers in the
//! one `.shared .align 16` array), then `bar.sync 0`, then reads it. A use whose range is
//! disjoint from the previous use's (whose reads may still be in flight) needs no barrier
//! before its writes: the uses before that one were read before the previous use's barrier.
//! So a use goes below the previous one's range when it fits there, else just past it when that
//! stays within the scratch's budget, else at offset 0 after a barrier, as it does where the
//! previous use is not known (a loop head, after a loop, the join of branches that used
//! different ranges). The budget ([`scratch_budget`]) is the program's share of an SM's shared
//! memory at the occupancy the kernel asks for (or that its registers allow at least), so that
//! placing uses side by side does not lower it; the scratch is never smaller than its largest
//! use.

/// The most static shared memory a kernel may declare; the staging scratch of one use stays
/// within it. A kernel needing more (its shared buffers) declares its array `.extern` and is
/// launched with that much dynamic shared memory.
pub const STATIC_LIMIT: usize = 48 * 1024;

/// The most shared memory a program may use on the supported targets (227 KiB, opted into as
/// dynamic shared memory).
pub const LIMIT: usize = 227 * 1024;

/// Alignment of a use's range (vector and `ldmatrix` accesses).
const ALIGN: usize = 16;

/// Shared memory of one SM of the supported targets, and what the hardware reserves per program.
const PER_SM: usize = 228 * 1024;
const RESERVED_PER_PROGRAM: usize = 1024;

/// Registers of one SM, and the most one thread may hold.
const REGISTERS_PER_SM: usize = 65536;
const MAX_REGISTERS_PER_THREAD: usize = 255;

/// The scratch bytes a kernel of `threads` per program, asking for `min_blocks` programs per SM,
/// with `buffers` bytes of shared buffers may use without fewer programs fitting an SM: its
/// share at `min_blocks`, or at the programs its registers allow at least, whichever is more.
pub fn scratch_budget(threads: usize, min_blocks: usize, buffers: usize) -> usize {
    let by_registers = (REGISTERS_PER_SM / (threads * MAX_REGISTERS_PER_THREAD)).max(1);
    let programs = min_blocks.max(by_registers);
    (PER_SM / programs).saturating_sub(RESERVED_PER_PROGRAM + buffers)
}

/// Which scratch range may still be read when the next use begins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pending {
    /// None: straight-line code before the first use, or just after a barrier.
    #[default]
    Nothing,
    /// The previous use's range `(offset, bytes)`.
    Range(usize, usize),
    /// Any range (control flow merged several possibilities).
    Unknown,
}

impl Pending {
    /// What may be pending where two paths meet (a branch's arms).
    pub fn join(self, other: Pending) -> Pending {
        match (self, other) {
            (a, b) if a == b => a,
            (Pending::Nothing, x) | (x, Pending::Nothing) => x,
            _ => Pending::Unknown,
        }
    }
}

/// The state of shared-memory use while emitting a kernel.
#[derive(Clone, Debug, Default)]
pub struct SmemPlan {
    bytes: usize,
    budget: usize,
    pending: Pending,
}

/// A use's place in the scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Use {
    /// Byte offset from the scratch's start.
    pub offset: usize,
    /// Whether a barrier must precede the use's writes.
    pub barrier: bool,
}

impl SmemPlan {
    /// A plan whose uses lie side by side within `budget` bytes (see [`scratch_budget`]).
    pub fn new(budget: usize) -> SmemPlan {
        SmemPlan {
            budget,
            ..SmemPlan::default()
        }
    }

    /// Starts a use of `bytes` bytes: its offset and whether a barrier must precede its writes.
    pub fn begin(&mut self, bytes: usize) -> Use {
        let room = self.budget.max(self.bytes);
        let (offset, barrier) = match self.pending {
            Pending::Nothing => (0, false),
            Pending::Range(off, _) if bytes <= off => (0, false),
            Pending::Range(off, n) => {
                let past = (off + n).div_ceil(ALIGN) * ALIGN;
                if past + bytes <= room {
                    (past, false)
                } else {
                    (0, true)
                }
            }
            Pending::Unknown => (0, true),
        };
        self.bytes = self.bytes.max(offset + bytes);
        self.pending = Pending::Range(offset, bytes);
        Use { offset, barrier }
    }
    /// The size of the scratch: the highest end of a use's range, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Which range may still be read.
    pub fn pending(&self) -> Pending {
        self.pending
    }
    /// Sets which range may still be read (loop heads, branch joins).
    pub fn set_pending(&mut self, pending: Pending) {
        self.pending = pending;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(offset, barrier)` of a use of `bytes`.
    fn place(p: &mut SmemPlan, bytes: usize) -> (usize, bool) {
        let u = p.begin(bytes);
        (u.offset, u.barrier)
    }

    #[test]
    fn the_budget_is_the_share_of_an_sm_at_the_occupancy_asked_or_allowed() {
        // 4 warps: at least 2 programs by registers; 8 warps: 1.
        assert_eq!(scratch_budget(128, 1, 0), 114 * 1024 - 1024);
        assert_eq!(scratch_budget(256, 1, 4096), 228 * 1024 - 1024 - 4096);
        assert_eq!(scratch_budget(128, 4, 32 * 1024), 57 * 1024 - 1024 - 32 * 1024);
        assert_eq!(scratch_budget(128, 8, 64 * 1024), 0);
    }

    /// Uses of `(bytes, offset, barrier)` in turn, within a budget past the largest use (320
    /// bytes) and within none (the largest use so far bounds them; a larger use grows it).
    #[test]
    fn uses_lie_side_by_side_within_the_budget_or_the_largest_use() {
        type Uses = &'static [(usize, usize, bool)];
        let cases: [(usize, Uses, usize); 2] = [
            (
                320,
                &[
                    (256, 0, false),
                    (40, 256, false),
                    (100, 0, false),
                    (200, 112, false),
                    (256, 0, true),
                ],
                312,
            ),
            (
                0,
                &[
                    (256, 0, false),
                    (40, 0, true),
                    (100, 48, false),
                    (48, 0, false),
                    (100, 48, false),
                    (200, 0, true),
                    (300, 0, true),
                ],
                300,
            ),
        ];
        for (budget, uses, total) in cases {
            let mut p = SmemPlan::new(budget);
            for &(bytes, offset, barrier) in uses {
                assert_eq!(
                    place(&mut p, bytes),
                    (offset, barrier),
                    "budget {budget}, a use of {bytes}"
                );
            }
            assert_eq!(p.bytes(), total);
        }
    }

    #[test]
    fn an_unknown_pending_range_needs_a_barrier() {
        let mut p = SmemPlan::default();
        p.begin(64);
        p.set_pending(Pending::Unknown);
        assert_eq!(place(&mut p, 256), (0, true));
        assert_eq!(p.pending(), Pending::Range(0, 256));
        assert_eq!(p.bytes(), 256);
    }

    #[test]
    fn branches_join_to_what_either_may_leave_pending() {
        let (a, b) = (Pending::Range(0, 64), Pending::Range(64, 32));
        assert_eq!(a.join(a), a);
        assert_eq!(Pending::Nothing.join(b), b);
        assert_eq!(a.join(b), Pending::Unknown);
        assert_eq!(Pending::Unknown.join(Pending::Nothing), Pending::Unknown);
    }
}
