//! Search spaces: the candidate configurations of a kernel (an explicit list, and/or the
//! product of named constexpr values), with constraints that prune invalid points before
//! anything is compiled and after loading (registers, spills).

use super::cache::Values;
use crate::driver::device::DeviceInfo;
use crate::driver::module::LoadInfo;
use replay_dsl::ConfigValues;
use std::collections::HashSet;

/// What constraints may look at besides the configuration.
#[derive(Clone, Copy, Debug)]
pub struct PruneContext<'a> {
    /// The device being tuned for.
    pub device: &'a DeviceInfo,
    /// The problem sizes, by name.
    pub sizes: &'a [(&'a str, i64)],
}

impl PruneContext<'_> {
    /// The problem size called `name`.
    pub fn size(&self, name: &str) -> Option<i64> {
        self.sizes.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

type Rule<C> = Box<dyn Fn(&C, &PruneContext<'_>) -> bool + Send + Sync>;
type LoadRule<C> = Box<dyn Fn(&C, &LoadInfo, &DeviceInfo) -> bool + Send + Sync>;

/// The named values of a configuration.
pub fn values_of<C: ConfigValues>(config: &C) -> Values {
    config.values().into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// A configuration's value called `name`.
pub fn value_of<C: ConfigValues>(config: &C, name: &str) -> Option<i64> {
    config.values().into_iter().find(|(k, _)| *k == name).map(|(_, v)| v)
}

/// The candidates a search space yields for one problem.
#[derive(Clone, Debug)]
pub struct Candidates<C> {
    /// Valid candidates, in search order (explicit ones first, then the product).
    pub valid: Vec<C>,
    /// Points removed, with the reason (the constraint's name or a configuration error).
    pub pruned: Vec<(Values, String)>,
}

/// The candidate configurations of a kernel and the rules that prune them.
pub struct SearchSpace<C: ConfigValues> {
    explicit: Vec<C>,
    axes: Vec<(String, Vec<i64>)>,
    rules: Vec<(String, Rule<C>)>,
    load_rules: Vec<(String, LoadRule<C>)>,
}

impl<C: ConfigValues> Default for SearchSpace<C> {
    fn default() -> Self {
        SearchSpace {
            explicit: Vec::new(),
            axes: Vec::new(),
            rules: Vec::new(),
            load_rules: Vec::new(),
        }
    }
}

impl<C: ConfigValues> std::fmt::Debug for SearchSpace<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchSpace")
            .field("explicit", &self.explicit)
            .field("axes", &self.axes)
            .field("rules", &self.rules.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .field(
                "load_rules",
                &self.load_rules.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<C: ConfigValues> SearchSpace<C> {
    /// An empty space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one candidate.
    pub fn config(mut self, config: C) -> Self {
        self.explicit.push(config);
        self
    }

    /// Adds candidates.
    pub fn configs(mut self, configs: impl IntoIterator<Item = C>) -> Self {
        self.explicit.extend(configs);
        self
    }

    /// Whether `values` (a configuration's, e.g. a cached best) is a point of this space: one
    /// of the explicit candidates, or on every axis one of its values. Cache keys bucket the
    /// problem sizes, so a cached result may come from another shape in the same bucket, with
    /// other shape constexprs: it must not be used then.
    pub fn admits(&self, values: &Values) -> bool {
        let on_axes = !self.axes.is_empty()
            && self
                .axes
                .iter()
                .all(|(name, vs)| values.get(name).is_some_and(|v| vs.contains(v)));
        on_axes || self.explicit.iter().any(|c| &values_of(c) == values)
    }

    /// Adds an axis of the product: constexpr (or `num_warps`) `name` takes each of `values`.
    /// The product of all axes is searched (the first axis varies slowest); names not given
    /// take their declared defaults.
    pub fn axis(mut self, name: &str, values: impl IntoIterator<Item = i64>) -> Self {
        self.axes.push((name.to_string(), values.into_iter().collect()));
        self
    }

    /// Keeps only the candidates for which `keep` holds; `name` is recorded for the others.
    pub fn constraint(
        mut self,
        name: &str,
        keep: impl Fn(&C, &PruneContext<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.rules.push((name.to_string(), Box::new(keep)));
        self
    }

    /// Keeps only the candidates whose loaded kernel satisfies `keep` (registers and spills
    /// as the driver reports them); checked after loading, before timing.
    pub fn load_constraint(
        mut self,
        name: &str,
        keep: impl Fn(&C, &LoadInfo, &DeviceInfo) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.load_rules.push((name.to_string(), Box::new(keep)));
        self
    }

    /// Requires the problem size `size` to be a multiple of the configuration value `value`
    /// (e.g. `divides("BLOCK_K", "k")`); an unknown size or value keeps the candidate.
    pub fn divides(self, value: &str, size: &str) -> Self {
        let (v, s) = (value.to_string(), size.to_string());
        self.constraint(&format!("{value} divides {size}"), move |c, ctx| {
            match (value_of(c, &v), ctx.size(&s)) {
                (Some(d), Some(n)) if d > 0 => n % d == 0,
                _ => true,
            }
        })
    }

    /// Requires an estimate of the shared memory a configuration uses to fit the device's
    /// per-block limit.
    pub fn max_shared_memory(self, bytes: impl Fn(&C) -> u64 + Send + Sync + 'static) -> Self {
        self.constraint("shared memory fits", move |c, ctx| {
            bytes(c) <= ctx.device.max_shared_per_block as u64
        })
    }

    /// Requires registers × threads of the loaded kernel to fit the 64 Ki register file of one
    /// SM, and no spills to local memory.
    pub fn register_limit(self) -> Self {
        self.load_constraint("registers fit without spills", |_, info, _| {
            let regs_ok = info
                .num_regs
                .is_none_or(|r| r as u64 * info.num_threads as u64 <= 65_536);
            regs_ok && info.local_bytes.is_none_or(|l| l == 0)
        })
    }

    /// The valid candidates for a problem, deduplicated, and the pruned points with reasons.
    pub fn candidates(&self, ctx: &PruneContext<'_>) -> Candidates<C> {
        let mut points: Vec<Result<C, (Values, String)>> = self.explicit.iter().cloned().map(Ok).collect();
        if !self.axes.is_empty() {
            let mut index = vec![0usize; self.axes.len()];
            if self.axes.iter().all(|(_, vs)| !vs.is_empty()) {
                loop {
                    let named: Vec<(&str, i64)> = self
                        .axes
                        .iter()
                        .zip(&index)
                        .map(|((n, vs), &i)| (n.as_str(), vs[i]))
                        .collect();
                    points.push(
                        C::from_values(&named)
                            .map_err(|e| (named.iter().map(|(n, v)| (n.to_string(), *v)).collect(), e.to_string())),
                    );
                    // Odometer increment, last axis fastest.
                    let mut d = self.axes.len();
                    loop {
                        if d == 0 {
                            break;
                        }
                        d -= 1;
                        index[d] += 1;
                        if index[d] < self.axes[d].1.len() {
                            break;
                        }
                        index[d] = 0;
                    }
                    if index.iter().all(|&i| i == 0) {
                        break;
                    }
                }
            }
        }
        let mut seen = HashSet::new();
        let mut out = Candidates {
            valid: Vec::new(),
            pruned: Vec::new(),
        };
        for p in points {
            match p {
                Err(pruned) => out.pruned.push(pruned),
                Ok(c) => {
                    let values = values_of(&c);
                    if !seen.insert(values.clone()) {
                        continue;
                    }
                    match self.rules.iter().find(|(_, keep)| !keep(&c, ctx)) {
                        Some((name, _)) => out.pruned.push((values, name.clone())),
                        None => out.valid.push(c),
                    }
                }
            }
        }
        out
    }

    /// The name of the first load constraint that `config`'s loaded kernel violates.
    pub fn check_loaded(&self, config: &C, info: &LoadInfo, device: &DeviceInfo) -> Result<(), String> {
        match self.load_rules.iter().find(|(_, keep)| !keep(config, info, device)) {
            Some((name, _)) => Err(name.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Device;
    use replay_dsl::{CompileError, ErrorKind};

    /// A configuration like `#[kernel]` generates: BLOCK (default 256) and num_warps (4).
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) struct Cfg {
        pub block: i64,
        pub num_warps: i64,
    }

    impl ConfigValues for Cfg {
        fn values(&self) -> Vec<(&'static str, i64)> {
            vec![("BLOCK", self.block), ("num_warps", self.num_warps)]
        }
        fn from_values(values: &[(&str, i64)]) -> Result<Self, CompileError> {
            let mut c = Cfg {
                block: 256,
                num_warps: 4,
            };
            for (n, v) in values {
                match *n {
                    "BLOCK" => c.block = *v,
                    "num_warps" => c.num_warps = *v,
                    other => {
                        return Err(CompileError::new(
                            "k",
                            "config",
                            ErrorKind::Constexpr(format!("unknown `{other}`")),
                        ))
                    }
                }
            }
            Ok(c)
        }
    }

    #[test]
    fn product_and_pruning() {
        let dev = Device::interpreter().info().clone();
        let sizes = [("n", 1i64 << 21)];
        let ctx = PruneContext {
            device: &dev,
            sizes: &sizes,
        };
        let space = SearchSpace::<Cfg>::new()
            .config(Cfg {
                block: 128,
                num_warps: 2,
            })
            .axis("BLOCK", [128, 512, 768, 1 << 20])
            .axis("num_warps", [2, 8])
            .divides("BLOCK", "n")
            .max_shared_memory(|c| c.block as u64 * 4);
        let c = space.candidates(&ctx);
        let got: Vec<(i64, i64)> = c.valid.iter().map(|c| (c.block, c.num_warps)).collect();
        assert_eq!(got, vec![(128, 2), (128, 8), (512, 2), (512, 8)]);
        let reasons: Vec<&str> = c.pruned.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "BLOCK divides n",
                "BLOCK divides n",
                "shared memory fits",
                "shared memory fits"
            ]
        );
        assert_eq!(
            c.pruned[0].0,
            Values::from([("BLOCK".into(), 768), ("num_warps".into(), 2)])
        );
    }

    #[test]
    fn bad_names_are_pruned_with_the_error() {
        let dev = Device::interpreter().info().clone();
        let ctx = PruneContext {
            device: &dev,
            sizes: &[],
        };
        let c = SearchSpace::<Cfg>::new().axis("BLOKC", [1]).candidates(&ctx);
        assert!(c.valid.is_empty());
        assert!(c.pruned[0].1.contains("BLOKC"));
        // An empty axis yields nothing; an empty space yields nothing.
        assert!(SearchSpace::<Cfg>::new()
            .axis("BLOCK", [])
            .candidates(&ctx)
            .valid
            .is_empty());
        assert!(SearchSpace::<Cfg>::new().candidates(&ctx).valid.is_empty());
    }

    #[test]
    fn load_constraints() {
        let dev = Device::interpreter().info().clone();
        let space = SearchSpace::<Cfg>::new().register_limit();
        let cfg = Cfg { block: 1, num_warps: 8 };
        let fits = LoadInfo {
            num_threads: 256,
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            num_regs: Some(255),
            local_bytes: Some(0),
        };
        assert!(space.check_loaded(&cfg, &fits, &dev).is_ok());
        let too_many = LoadInfo {
            num_threads: 1024,
            ..fits
        };
        assert_eq!(
            space.check_loaded(&cfg, &too_many, &dev).unwrap_err(),
            "registers fit without spills"
        );
        let spills = LoadInfo {
            local_bytes: Some(16),
            ..fits
        };
        assert!(space.check_loaded(&cfg, &spills, &dev).is_err());
        // The interpreter reports no registers: nothing to prune.
        assert!(space.check_loaded(&cfg, &LoadInfo::default(), &dev).is_ok());
    }
}
