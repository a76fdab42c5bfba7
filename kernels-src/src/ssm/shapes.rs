//! Head layouts of the SSM layers in the ReplaySSM benchmark models.
//!
//! Value heads share key/query heads in groups (GQA): value head `h` reads the `B`/`C` (Mamba-2)
//! or `k`/`q` (GDN) vectors of group `h / (heads / groups)`. Per value head the state is a
//! `dv × dk` matrix (row-major, `dv` rows), the layout of the serving engines' SSM cache
//! `(batch, heads, dv, dk)`.

/// Which recurrence a model's SSM layers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mixer {
    /// Mamba-2 (SSD): `S ← α S + v kᵀ` with a scalar decay per head and step.
    Mamba2,
    /// Gated DeltaNet: `S ← α S + u kᵀ` with the delta-rule correction `u = β (v − α S k)`.
    GatedDeltaNet,
}

/// The SSM head layout of one model (all of its SSM layers share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelShape {
    /// Lookup name, e.g. `"nemotron3-super-120b"`.
    pub name: &'static str,
    /// Recurrence of the SSM layers.
    pub mixer: Mixer,
    /// Number of SSM layers.
    pub layers: usize,
    /// Key/query heads (Mamba-2: `B`/`C` groups).
    pub groups: usize,
    /// Value heads; a multiple of `groups`.
    pub heads: usize,
    /// Key dimension (Mamba-2: `d_state`, the length of `B` and `C`).
    pub dk: usize,
    /// Value dimension (Mamba-2: `head_dim`, the length of `x`).
    pub dv: usize,
}

impl ModelShape {
    /// Value heads per key/query group.
    pub const fn heads_per_group(&self) -> usize {
        self.heads / self.groups
    }

    /// The group whose key/query vectors value head `head` reads.
    pub const fn group_of(&self, head: usize) -> usize {
        head / self.heads_per_group()
    }

    /// Elements of one value head's state, `dv · dk`.
    pub const fn state_elems(&self) -> usize {
        self.dv * self.dk
    }

    /// The preset (or [`CPU_TEST`]) called `name`.
    pub fn by_name(name: &str) -> Option<ModelShape> {
        PRESETS.iter().chain([&CPU_TEST]).find(|s| s.name == name).copied()
    }
}

/// Nemotron-3-Nano-4B: Mamba-2, 21 SSM layers, 8 groups, 96 value heads, `dk` 128, `dv` 80.
pub const NEMOTRON3_NANO_4B: ModelShape = ModelShape {
    name: "nemotron3-nano-4b",
    mixer: Mixer::Mamba2,
    layers: 21,
    groups: 8,
    heads: 96,
    dk: 128,
    dv: 80,
};

/// Nemotron-3-Super-120B-A12B: Mamba-2, 40 SSM layers, 8 groups, 128 value heads, `dk` 128,
/// `dv` 64 (4 MiB of fp32 state per layer and sequence).
pub const NEMOTRON3_SUPER_120B: ModelShape = ModelShape {
    name: "nemotron3-super-120b",
    mixer: Mixer::Mamba2,
    layers: 40,
    groups: 8,
    heads: 128,
    dk: 128,
    dv: 64,
};

/// Qwen3.5-4B: Gated DeltaNet, 24 SSM layers, 16 key heads, 32 value heads, `dk = dv = 128`.
pub const QWEN35_4B: ModelShape = ModelShape {
    name: "qwen3.5-4b",
    mixer: Mixer::GatedDeltaNet,
    layers: 24,
    groups: 16,
    heads: 32,
    dk: 128,
    dv: 128,
};

/// Qwen3.5-122B-A10B: Gated DeltaNet, 36 SSM layers, 16 key heads, 64 value heads,
/// `dk = dv = 128`.
pub const QWEN35_122B: ModelShape = ModelShape {
    name: "qwen3.5-122b",
    mixer: Mixer::GatedDeltaNet,
    layers: 36,
    groups: 16,
    heads: 64,
    dk: 128,
    dv: 128,
};

/// The benchmark models of the ReplaySSM paper.
pub const PRESETS: [ModelShape; 4] = [NEMOTRON3_NANO_4B, NEMOTRON3_SUPER_120B, QWEN35_4B, QWEN35_122B];

/// A reduced Mamba-2 shape for CPU tests: 2 groups of 3 value heads, `dk` 16, `dv` 8, so that
/// group sharing, `dk ≠ dv` and several heads are all exercised at a tiny cost.
pub const CPU_TEST: ModelShape = ModelShape {
    name: "cpu-test",
    mixer: Mixer::Mamba2,
    layers: 2,
    groups: 2,
    heads: 6,
    dk: 16,
    dv: 8,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_grouping() {
        for shape in PRESETS.iter().chain([&CPU_TEST]) {
            assert_eq!(ModelShape::by_name(shape.name), Some(*shape));
            assert_eq!(shape.heads % shape.groups, 0, "{}", shape.name);
            assert_eq!(shape.group_of(0), 0);
            assert_eq!(shape.group_of(shape.heads - 1), shape.groups - 1);
        }
        assert_eq!(ModelShape::by_name("mamba-9000"), None);
        let s = NEMOTRON3_SUPER_120B;
        assert_eq!(s.heads_per_group(), 16);
        assert_eq!((s.group_of(15), s.group_of(16)), (0, 1));
        // 4 MiB of fp32 state per layer and sequence (notes, appendix C.2).
        assert_eq!(s.heads * s.state_elems() * 4, 4 << 20);
    }
}
