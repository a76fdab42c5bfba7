//! HBM traffic of Mamba-2 decoding: conventional, replay and speculative, per step and per
//! window (ReplaySSM, section 3.1 and appendices A, C.3, C.5).
//!
//! Counted: state reads and writes and record reads and writes. Not counted: traffic that every
//! method shares (the step's inputs `x, dt, B, C, z`, the output `y`, parameters), and re-reads
//! that hit in cache. Per value head, with `M_S = b · dv · dk` bytes of state and `r` bytes per
//! record:
//!
//! - conventional step: `2 M_S` (read and write the state);
//! - replay step at window position `i` (after appending, `1 ≤ i ≤ L`): non-flush (`i < L`)
//!   `M_S + (i−1) r + r` (read the checkpoint and the `i−1` older records, write the new one);
//!   flush (`i = L`) `2 M_S + (L−1) r` (its own record stays in registers);
//! - window of `L` steps: conventional `2 L M_S`, replay
//!   `(L+1) M_S + (L−1)(L+2)/2 · r`;
//! - verification of `T` drafts after `h` committed records: `M_S + h r + T r`, plus `M_S`
//!   when it flushes (`h + T > L`); the snapshotting baseline reads the state once and writes a
//!   snapshot per draft, `(1 + T) M_S`.
//!
//! **Record size.** The paper's `r = 2 dv + 2 dk + 4` (appendix C.3) stores a bf16 key with every
//! value head. Our records ([`crate::ssm::reference::replay::Record`]) hold `dt'` as f32 and `x`
//! as bf16 per value head, but `B` as bf16 once per group, so amortised per value head
//! `r = 4 + 2 dv + 2 dk / (heads / groups)`. Both are available as [`RecordLayout`]s; the paper's
//! numbers (0.58×, `L* ≈ 13`) use [`RecordLayout::KeyPerHead`].

use super::shapes::ModelShape;

/// How a record's bytes are counted per value head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordLayout {
    /// The paper's accounting: f32 decay, bf16 `x` and bf16 key per value head,
    /// `r = 4 + 2 dv + 2 dk`.
    KeyPerHead,
    /// Our layout: f32 `dt'` and bf16 `x` per value head, bf16 `B` once per group,
    /// `r = 4 + 2 dv + 2 dk · groups / heads`.
    KeyPerGroup,
}

/// The traffic model of one model's SSM layers at one batch size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrafficModel {
    /// Head layout and layer count.
    pub shape: ModelShape,
    /// Sequences decoded together.
    pub batch: usize,
    /// Bytes per state element `b` (4 for fp32, 2 for fp16, 1 for fp8, 0.5 for fp4 without
    /// scales).
    pub state_elem_bytes: f64,
    /// Record accounting.
    pub layout: RecordLayout,
}

impl TrafficModel {
    /// State bytes of one value head, `M_S = b · dv · dk`.
    pub fn state_bytes_per_head(&self) -> f64 {
        self.state_elem_bytes * self.shape.state_elems() as f64
    }

    /// Record bytes `r` per value head and step.
    pub fn record_bytes_per_head(&self) -> f64 {
        let s = &self.shape;
        let key = match self.layout {
            RecordLayout::KeyPerHead => 2.0 * s.dk as f64,
            RecordLayout::KeyPerGroup => 2.0 * (s.dk * s.groups) as f64 / s.heads as f64,
        };
        4.0 + 2.0 * s.dv as f64 + key
    }

    /// Bytes per decode step over the whole batch and all SSM layers, given bytes per value head.
    pub fn per_step(&self, per_head: f64) -> f64 {
        per_head * (self.shape.heads * self.shape.layers * self.batch) as f64
    }

    /// Bytes of one SSM layer, given bytes for all layers.
    pub fn per_layer(&self, all_layers: f64) -> f64 {
        all_layers / self.shape.layers as f64
    }

    /// Conventional decode step: read and write every state.
    pub fn conventional_step(&self) -> f64 {
        self.per_step(2.0 * self.state_bytes_per_head())
    }

    /// Replay decode step at window position `pos` (`1..=window`, counted after appending the
    /// step's record); `pos == window` is the flush step.
    pub fn replay_step(&self, pos: usize, window: usize) -> f64 {
        assert!((1..=window).contains(&pos));
        let (m, r) = (self.state_bytes_per_head(), self.record_bytes_per_head());
        let older = (pos - 1) as f64 * r;
        self.per_step(if pos == window { 2.0 * m + older } else { m + older + r })
    }

    /// A window of `window` conventional steps, `2 L M_S` per head.
    pub fn conventional_window(&self, window: usize) -> f64 {
        window as f64 * self.conventional_step()
    }

    /// A window of `window` replay steps, `(L+1) M_S + (L−1)(L+2)/2 · r` per head.
    pub fn replay_window(&self, window: usize) -> f64 {
        let l = window as f64;
        let per_head =
            (l + 1.0) * self.state_bytes_per_head() + (l - 1.0) * (l + 2.0) / 2.0 * self.record_bytes_per_head();
        self.per_step(per_head)
    }

    /// The byte-ceiling speedup of replay over conventional decoding, conventional window bytes
    /// over replay window bytes.
    pub fn ceiling_speedup(&self, window: usize) -> f64 {
        self.conventional_window(window) / self.replay_window(window)
    }

    /// Output-only verification of `drafts` drafts after `committed` records in a window of
    /// `window`: read the checkpoint and the committed records, write the draft records, and
    /// write the checkpoint too when the step flushes (`h + T > L`).
    pub fn verify_step(&self, committed: usize, drafts: usize, window: usize) -> f64 {
        let (m, r) = (self.state_bytes_per_head(), self.record_bytes_per_head());
        let flush = if committed + drafts > window { m } else { 0.0 };
        self.per_step(m + flush + (committed + drafts) as f64 * r)
    }

    /// The snapshotting speculative baseline (vLLM): one state read and one snapshot written per
    /// draft, `(1 + T) M_S`.
    pub fn snapshot_verify_step(&self, drafts: usize) -> f64 {
        self.per_step((1 + drafts) as f64 * self.state_bytes_per_head())
    }

    /// The notes' amortised bytes per accepted token and value head (appendix C.5), with `ā`
    /// accepted tokens per step and `T` drafts:
    /// `f(L) = M_S/ā + M_S/L + rL/(2ā) − r/2 + rT/ā − rT/L`. At `ā = T = 1` it is exactly
    /// [`TrafficModel::replay_window`]` / L` per head.
    pub fn bytes_per_token_per_head(&self, window: f64, mean_accepted: f64, drafts: f64) -> f64 {
        let (m, r, l, a, t) = (
            self.state_bytes_per_head(),
            self.record_bytes_per_head(),
            window,
            mean_accepted,
            drafts,
        );
        m / a + m / l + r * l / (2.0 * a) - r / 2.0 + r * t / a - r * t / l
    }

    /// The window minimising [`TrafficModel::bytes_per_token_per_head`]:
    /// `L* = sqrt(2 ā (M_S/r − T))`.
    pub fn best_window(&self, mean_accepted: f64, drafts: f64) -> f64 {
        let ratio = self.state_bytes_per_head() / self.record_bytes_per_head();
        (2.0 * mean_accepted * (ratio - drafts)).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssm::shapes::{NEMOTRON3_NANO_4B, NEMOTRON3_SUPER_120B};

    fn model(shape: ModelShape, layout: RecordLayout) -> TrafficModel {
        TrafficModel {
            shape,
            batch: 256,
            state_elem_bytes: 4.0,
            layout,
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn record_sizes() {
        let paper = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerHead);
        assert_eq!(paper.record_bytes_per_head(), 388.0); // 2·64 + 2·128 + 4
        assert_eq!(paper.state_bytes_per_head(), 32768.0);
        let ours = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerGroup);
        assert_eq!(ours.record_bytes_per_head(), 148.0); // 4 + 128 + 256/16
        let nano = model(NEMOTRON3_NANO_4B, RecordLayout::KeyPerGroup);
        assert!(close(nano.record_bytes_per_head(), 4.0 + 160.0 + 256.0 / 12.0, 1e-15));
    }

    /// The window closed form is the sum of the per-step bytes.
    #[test]
    fn window_is_sum_of_steps() {
        for layout in [RecordLayout::KeyPerHead, RecordLayout::KeyPerGroup] {
            let m = model(NEMOTRON3_NANO_4B, layout);
            for l in [1, 2, 4, 16, 32] {
                let steps: f64 = (1..=l).map(|i| m.replay_step(i, l)).sum();
                assert!(close(steps, m.replay_window(l), 1e-14), "L = {l}");
                // At ā = T = 1 the notes' per-token cost is the window average.
                let f = m.per_step(m.bytes_per_token_per_head(l as f64, 1.0, 1.0));
                assert!(close(f, m.replay_window(l) / l as f64, 1e-14), "L = {l}");
            }
            // L = 1 flushes every step: exactly conventional.
            assert!(close(m.replay_window(1), m.conventional_window(1), 1e-15));
        }
    }

    /// Notes, section 3.1 / C.3: fp32 state at Nemotron-3-Super shapes and L = 16 moves 0.58×
    /// the conventional bytes, a 1.72× ceiling. Our group-shared records do better.
    #[test]
    fn paper_ratio_super_l16() {
        let paper = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerHead);
        let ratio = paper.replay_window(16) / paper.conventional_window(16);
        assert!((ratio - 0.58).abs() < 0.005, "{ratio}");
        assert!((paper.ceiling_speedup(16) - 1.72).abs() < 0.005);
        // State terms alone: (L+1)/(2L) = 17/32.
        assert!(close((16.0 + 1.0) / 32.0, 0.53125, 1e-15));
        let ours = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerGroup);
        assert!((ours.ceiling_speedup(16) - 1.817).abs() < 0.001);
    }

    /// Notes, appendix C.5: M_S/r ≈ 84 at Nemotron-3-Super shapes, L* ≈ 13 for standard decode
    /// and ≈ 24 for T = 4, ā = 3.5; L* minimises the per-token bytes.
    #[test]
    fn best_window_super() {
        let paper = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerHead);
        let ratio = paper.state_bytes_per_head() / paper.record_bytes_per_head();
        assert_eq!(ratio.round(), 84.0);
        let standard = paper.best_window(1.0, 1.0);
        assert_eq!(standard.round(), 13.0, "{standard}");
        let spec = paper.best_window(3.5, 4.0);
        assert_eq!(spec.round(), 24.0, "{spec}");
        for (a, t) in [(1.0, 1.0), (3.5, 4.0)] {
            let best = paper.best_window(a, t);
            let f = |l: f64| paper.bytes_per_token_per_head(l, a, t);
            assert!(f(best) < f(best - 0.5) && f(best) < f(best + 0.5));
        }
        // Group-shared records make records cheaper and the best window longer (≈ 21).
        let ours = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerGroup);
        assert_eq!(ours.best_window(1.0, 1.0).round(), 21.0);
    }

    /// Notes, appendix A (B = 256, fp32, Nemotron-3-Super, per layer; state bytes only): one
    /// state is 1.07 GB; snapshots at T = 8 move 9.7 GB; replay verification is 1R (1.1 GB)
    /// without flush and 1R + 1W (2.1 GB) with it. Appendix C.2: 8 MiB per layer and sequence
    /// per conventional step, 320 MiB over the 40 layers.
    #[test]
    fn appendix_figures() {
        let m = model(NEMOTRON3_SUPER_120B, RecordLayout::KeyPerHead);
        let gb = |x: f64| m.per_layer(x) / 1e9;
        let records = |n: usize| m.per_step(n as f64 * m.record_bytes_per_head());
        assert!((gb(m.per_step(m.state_bytes_per_head())) - 1.07).abs() < 0.005);
        assert!((gb(m.snapshot_verify_step(8)) - 9.7).abs() < 0.05);
        assert!((gb(m.verify_step(0, 8, 16) - records(8)) - 1.07).abs() < 0.005);
        assert!((gb(m.verify_step(10, 8, 16) - records(18)) - 2.15).abs() < 0.005);
        let one = TrafficModel { batch: 1, ..m };
        assert_eq!(one.per_layer(one.conventional_step()), (8 << 20) as f64);
        assert_eq!(one.conventional_step(), (320 << 20) as f64);
        // T = 1 snapshotting is the conventional step.
        assert_eq!(m.snapshot_verify_step(1), m.conventional_step());
    }
}
