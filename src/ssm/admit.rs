//! The state manager's own small device kernel: admitting sequences into slots without a host
//! round trip over the whole state buffer.

use replay_dsl::prelude::*;

/// Admits `n` sequences: for each `i < n` with `slot = admit_slots[i] != 0`, copies the initial
/// state `init[i]` (`STATE` f32s, `[HEADS, DV, DK]`) into `state[slot]` (a checkpoint, or the
/// conventional state) and, when `WITH_META`, resets the slot's counters
/// `meta[slot] = (start 0, h 0, flag, 0)`, and with `LP` writes its f16 into `state_lp[slot]`
/// (the low-precision checkpoint). Program `(i, b)` copies elements `b·BLOCK ..` of sequence
/// `i`. Slot 0 (padding) is never written.
#[kernel]
pub fn mamba2_admit(
    #[extent(n)] admit_slots: Ptr<i32>,
    #[extent(n * STATE)] init: Ptr<f32>,
    #[extent(slots * STATE)] state: Ptr<f32>,
    #[extent(slots * STATE * LP)] state_lp: Ptr<f16>,
    #[extent(slots * 4 * WITH_META)] meta: Ptr<i32>,
    n: i32,
    slots: i32,
    flag: i32,
    #[constexpr(default = 1024)] STATE: usize,
    #[constexpr(default = true)] WITH_META: bool,
    #[constexpr(default = 1024)] BLOCK: usize,
    #[constexpr(default = false)] LP: bool,
) {
    let i = program_id(0);
    let offs = program_id(1) * BLOCK + arange(BLOCK);
    let slot = load(admit_slots + i, true);
    if slot != 0 {
        let m = offs < STATE;
        let src = load(init + i.cast::<i64>() * STATE + offs, m);
        store(state + slot.cast::<i64>() * STATE + offs, src, m);
        if LP {
            store(state_lp + slot.cast::<i64>() * STATE + offs, src.cast::<f16>(), m);
        }
        if WITH_META {
            if program_id(1) == 0 {
                let w = arange(4);
                store(meta + slot * 4 + w, select(w == 2, flag, 0), w < 4);
            }
        }
    }
}
