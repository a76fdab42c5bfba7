//! The replay form of Mamba-2 decoding: a checkpoint `S_ckpt` per slot plus a ring of input
//! records, instead of a state written every step (ReplaySSM, algorithms 1 and 2).
//!
//! With `h` committed records after the checkpoint the logical state is
//! `S_h = γ_h S_ckpt + Σ_{j≤h} γ_{j+1:h} v_j k_jᵀ`, where `γ_{i:j} = Π_{l=i..j} α_l` (1 when empty)
//! and `γ_h = γ_{1:h}`. Decay products are always computed as `exp(A · Σ dt'_l)` with the sum
//! accumulated directly over the range (walking back from its end), never as a ratio of prefix
//! products or a difference of prefix sums: a zero decay or a long window cannot give `0/0`.

use super::{check_batch, check_input, dot, finish_output, softplus, Mamba2Params, SlotStates, StepInput};
use crate::ssm::shapes::ModelShape;

/// What replay stores per decode step and row (all heads) instead of a state:
/// `dt'` per head, `x` per value head and `B` per group. From it `α = exp(dt'·A)`,
/// `v = dt'·x` and `k = B`.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// `dt' = softplus(dt + dt_bias)` per head, `[heads]`.
    pub dt: Vec<f64>,
    /// `x` per value head, `[heads][dv]`.
    pub x: Vec<f64>,
    /// `B` per group, `[groups][dk]`.
    pub b: Vec<f64>,
}

impl Record {
    /// The record of one token's inputs.
    pub fn new(params: &Mamba2Params, input: &StepInput) -> Self {
        let dt = input
            .dt
            .iter()
            .zip(&params.dt_bias)
            .map(|(dt, bias)| softplus(dt + bias))
            .collect();
        Record {
            dt,
            x: input.x.clone(),
            b: input.b.clone(),
        }
    }
}

/// The commit rule after speculative verification: with `committed` records, `accepted` of the
/// drafts accepted and `next_drafts` drafts to verify next, returns the new committed count
/// `committed + accepted` (a pointer move: rejected records are overwritten later) and the next
/// step's flush flag, `committed + accepted + next_drafts > window`.
pub fn commit_rule(committed: usize, accepted: usize, next_drafts: usize, window: usize) -> (usize, bool) {
    let h = committed + accepted;
    (h, h + next_drafts > window)
}

/// Checkpoints, record rings and per-slot counters of the replay form.
///
/// Each slot has a ring of capacity `window + max_drafts` (`L + T`), a start position, the number
/// `h` of committed records, the number of drafts awaiting [`ReplayCache::commit`] and a flush
/// flag. Slot 0 is the padding slot and is never touched.
#[derive(Clone, Debug)]
pub struct ReplayCache {
    ckpt: SlotStates,
    window: usize,
    max_drafts: usize,
    ring: Vec<Option<Record>>,
    start: Vec<usize>,
    committed: Vec<usize>,
    pending: Vec<usize>,
    flush: Vec<bool>,
}

impl ReplayCache {
    /// A cache whose checkpoints are `checkpoints` and whose rings are empty, flushing every
    /// `window` (`L ≥ 1`) records and verifying at most `max_drafts` (`T ≤ L`) drafts per step.
    pub fn new(checkpoints: SlotStates, window: usize, max_drafts: usize) -> Self {
        assert!(window >= 1, "window must be at least 1");
        assert!(max_drafts <= window, "drafts must fit in one window (T ≤ L)");
        let slots = checkpoints.slots();
        ReplayCache {
            ckpt: checkpoints,
            window,
            max_drafts,
            ring: vec![None; slots * (window + max_drafts)],
            start: vec![0; slots],
            committed: vec![0; slots],
            pending: vec![0; slots],
            flush: vec![false; slots],
        }
    }

    /// The checkpoints `S_ckpt`.
    pub fn checkpoints(&self) -> &SlotStates {
        &self.ckpt
    }

    /// The replay window `L`.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Ring capacity per slot, `L + T`.
    pub fn capacity(&self) -> usize {
        self.window + self.max_drafts
    }

    /// Committed records `h` of a slot.
    pub fn committed(&self, slot: usize) -> usize {
        self.committed[slot]
    }

    /// Whether the next verification of `slot` folds its committed records first.
    pub fn flush_pending(&self, slot: usize) -> bool {
        self.flush[slot]
    }

    /// The logical state of a slot, `REPLAY(S_ckpt, B[1:h])`, `[head][dv][dk]`.
    pub fn state(&self, params: &Mamba2Params, slot: usize) -> Vec<f64> {
        let mut s = self.ckpt.slot(slot).to_vec();
        fold(
            self.ckpt.shape(),
            &mut s,
            &self.records(slot, self.committed[slot]),
            &params.a,
        );
        s
    }

    /// One standard decode step (algorithm 1). For each non-padding row: append the record of
    /// `inputs[r]` (`h ← h + 1`) and write
    /// `y = γ_h (S_ckpt q) + Σ_{j≤h} γ_{j+1:h} (k_jᵀ q) v_j + D x`, gated by `silu(z)`, to
    /// `out[r][head][dv]`. When `h` reaches `L` this is a flush step:
    /// `S_ckpt ← γ_L S_ckpt + Σ_j γ_{j+1:L} v_j k_jᵀ`, the ring is emptied (`h ← 0`) and the
    /// current record is never written to it. Non-flush steps write one record and no state.
    /// Resets the slot's flush flag (`h + 1 > L` is false after a decode step).
    pub fn decode_step(&mut self, params: &Mamba2Params, slots: &[usize], inputs: &[StepInput], out: &mut [f64]) {
        let shape = self.ckpt.shape();
        check_batch(shape, params, self.ckpt.slots(), slots, inputs.len(), out.len(), 1);
        let per_row = shape.heads * shape.dv;
        for (r, (&slot, input)) in slots.iter().zip(inputs).enumerate() {
            if slot == 0 {
                continue;
            }
            check_input(shape, input);
            assert_eq!(self.pending[slot], 0, "slot {slot} has uncommitted drafts");
            let h = self.committed[slot];
            let record = Record::new(params, input);
            let mut records = self.records(slot, h);
            records.push(&record);
            let y = &mut out[r * per_row..(r + 1) * per_row];
            output_only(shape, params, self.ckpt.slot(slot), &records, h, &[input], y);
            if h + 1 == self.window {
                let records: Vec<Record> = records.into_iter().cloned().collect();
                let refs: Vec<&Record> = records.iter().collect();
                fold(shape, self.ckpt.slot_mut(slot), &refs, &params.a);
                self.committed[slot] = 0;
            } else {
                self.write(slot, h, record);
                self.committed[slot] = h + 1;
            }
            self.flush[slot] = false;
        }
    }

    /// Output-only speculative verification (algorithm 2). Every row carries the same number
    /// `1 ≤ T ≤ max_drafts` of draft inputs (padding rows' are not read). For each non-padding
    /// row `r` the records of its drafts `drafts[r]` are appended
    /// after the `h` committed ones (`h` unchanged) and
    /// `O = S_ckpt Q D + V (W ⊙ (Kᵀ Q))` (`D = diag(γ_{h+s})`, `W_{js} = γ_{j+1:h+s}` for
    /// `j ≤ h+s`, else 0; `Kᵀ Q` once per group), plus `D x` and the gate, goes to
    /// `out[r][s][head][dv]`. If the slot's flush flag is set (it must equal `h + T > L`), the
    /// `h` committed records are then folded into the checkpoint and dropped, keeping the drafts
    /// (`h ← 0`). Call [`ReplayCache::commit`] before the next step.
    pub fn verify(&mut self, params: &Mamba2Params, slots: &[usize], drafts: &[Vec<StepInput>], out: &mut [f64]) {
        let shape = self.ckpt.shape();
        let t = drafts.first().map_or(1, Vec::len);
        assert!((1..=self.max_drafts).contains(&t), "draft count {t} out of range");
        assert!(
            drafts.iter().all(|d| d.len() == t),
            "every row carries the same number of drafts"
        );
        check_batch(shape, params, self.ckpt.slots(), slots, drafts.len(), out.len(), t);
        let per_row = t * shape.heads * shape.dv;
        for (r, (&slot, row_drafts)) in slots.iter().zip(drafts).enumerate() {
            if slot == 0 {
                continue;
            }
            assert_eq!(self.pending[slot], 0, "slot {slot} has uncommitted drafts");
            let h = self.committed[slot];
            assert_eq!(
                self.flush[slot],
                h + t > self.window,
                "flush flag of slot {slot} not computed for T = {t}"
            );
            for (s, input) in row_drafts.iter().enumerate() {
                check_input(shape, input);
                self.write(slot, h + s, Record::new(params, input));
            }
            let records = self.records(slot, h + t);
            let queries: Vec<&StepInput> = row_drafts.iter().collect();
            let y = &mut out[r * per_row..(r + 1) * per_row];
            output_only(shape, params, self.ckpt.slot(slot), &records, h, &queries, y);
            if self.flush[slot] {
                let committed: Vec<Record> = records[..h].iter().map(|&rec| rec.clone()).collect();
                let refs: Vec<&Record> = committed.iter().collect();
                fold(shape, self.ckpt.slot_mut(slot), &refs, &params.a);
                self.start[slot] = (self.start[slot] + h) % self.capacity();
                self.committed[slot] = 0;
            }
            self.pending[slot] = t;
        }
    }

    /// Commits the verification results (the device-side commit kernel): for each non-padding
    /// row, `accepted[r] ≤ T` drafts become committed records by [`commit_rule`], and the flush
    /// flag is computed for a next verification of `next_drafts` drafts. A slot that did not
    /// verify this step may be passed with `accepted = 0` to recompute its flag for a new `T`.
    pub fn commit(&mut self, slots: &[usize], accepted: &[usize], next_drafts: usize) {
        assert_eq!(slots.len(), accepted.len());
        assert!(next_drafts <= self.max_drafts);
        for (&slot, &a) in slots.iter().zip(accepted) {
            if slot == 0 {
                continue;
            }
            assert!(
                a <= self.pending[slot],
                "slot {slot}: accepted {a} of {} drafts",
                self.pending[slot]
            );
            let (h, flush) = commit_rule(self.committed[slot], a, next_drafts, self.window);
            self.committed[slot] = h;
            self.flush[slot] = flush;
            self.pending[slot] = 0;
        }
    }

    fn write(&mut self, slot: usize, pos: usize, record: Record) {
        let cap = self.capacity();
        assert!(pos < cap, "ring of slot {slot} overflows");
        self.ring[slot * cap + (self.start[slot] + pos) % cap] = Some(record);
    }

    /// The first `n` records of a slot in logical order.
    fn records(&self, slot: usize, n: usize) -> Vec<&Record> {
        let cap = self.capacity();
        (0..n)
            .map(|p| {
                self.ring[slot * cap + (self.start[slot] + p) % cap]
                    .as_ref()
                    .expect("record written")
            })
            .collect()
    }
}

/// Output-only evaluation for one row: `records` holds positions `1..=h+T`, the `h` committed
/// records followed by the `T` drafts whose inputs are `queries`; draft `s` sees positions
/// `1..=h+s`. Writes `out[s][head][dv]`.
fn output_only(
    shape: ModelShape,
    params: &Mamba2Params,
    ckpt: &[f64],
    records: &[&Record],
    h: usize,
    queries: &[&StepInput],
    out: &mut [f64],
) {
    let (dv, dk, t) = (shape.dv, shape.dk, queries.len());
    assert_eq!(records.len(), h + t);
    for g in 0..shape.groups {
        let key = |j: usize| &records[j].b[g * dk..(g + 1) * dk];
        let query = |s: usize| &queries[s].c[g * dk..(g + 1) * dk];
        // Kᵀ Q, once per group: ktq[j * T + s] = k_j · q_s.
        let ktq: Vec<f64> = (0..h + t)
            .flat_map(|j| (0..t).map(move |s| dot(key(j), query(s))))
            .collect();
        for head in g * shape.heads_per_group()..(g + 1) * shape.heads_per_group() {
            let a = params.a[head];
            let s_ckpt = &ckpt[head * dv * dk..(head + 1) * dv * dk];
            for s in 0..t {
                let y = &mut out[(s * shape.heads + head) * dv..(s * shape.heads + head + 1) * dv];
                y.fill(0.0);
                // V (W ⊙ KᵀQ) for column s, walking back from the draft's own position so that
                // acc = Σ_{l=j+1..h+s} dt'_l and W_js = exp(A·acc).
                let mut acc = 0.0;
                for j in (0..h + s + 1).rev() {
                    let coef = (a * acc).exp() * ktq[j * t + s] * records[j].dt[head];
                    for (yi, xi) in y.iter_mut().zip(&records[j].x[head * dv..(head + 1) * dv]) {
                        *yi += coef * xi;
                    }
                    acc += records[j].dt[head];
                }
                // S_ckpt Q D: D_ss = γ_{h+s} = exp(A · Σ_{l≤h+s} dt'_l).
                let gamma = (a * acc).exp();
                for (i, yi) in y.iter_mut().enumerate() {
                    *yi += gamma * dot(&s_ckpt[i * dk..(i + 1) * dk], query(s));
                }
                finish_output(y, params, queries[s], head, dv);
            }
        }
    }
}

/// The flush fold of `n = records.len()` records into one slot's checkpoint (all heads):
/// `S ← γ_n S + Σ_j γ_{j+1:n} v_j k_jᵀ`.
fn fold(shape: ModelShape, slot_state: &mut [f64], records: &[&Record], a: &[f64]) {
    let (dv, dk) = (shape.dv, shape.dk);
    for head in 0..shape.heads {
        let g = shape.group_of(head);
        // weights[j] = γ_{j+1:n}, accumulated walking back from the end.
        let mut weights = vec![0.0; records.len()];
        let mut acc = 0.0;
        for (j, rec) in records.iter().enumerate().rev() {
            weights[j] = (a[head] * acc).exp();
            acc += rec.dt[head];
        }
        let gamma = (a[head] * acc).exp();
        let s = &mut slot_state[head * dv * dk..(head + 1) * dv * dk];
        for (i, row) in s.chunks_exact_mut(dk).enumerate() {
            for (c, sic) in row.iter_mut().enumerate() {
                let update: f64 = records
                    .iter()
                    .zip(&weights)
                    .map(|(rec, w)| w * rec.dt[head] * rec.x[head * dv + i] * rec.b[g * dk + c])
                    .sum();
                *sic = gamma * *sic + update;
            }
        }
    }
}
