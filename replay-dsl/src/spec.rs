//! What `#[kernel]` generates for each kernel: its name, source, parameters, constexpr
//! configuration and a tracer, gathered in the [`KernelDef`] trait.

use crate::error::CompileError;
use crate::ir::Kernel;
use crate::types::DType;
use std::fmt::Debug;

/// One runtime parameter of a kernel as declared in its signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// Name as written.
    pub name: &'static str,
    /// Scalar or pointer type.
    pub dtype: DType,
}

/// A kernel's constexpr configuration: named integer values (bools as 0/1), plus `num_warps`.
pub trait ConfigValues: Sized + Clone + Debug + Send + Sync {
    /// `(name, value)` for every constexpr, in declaration order, then `("num_warps", n)`.
    fn values(&self) -> Vec<(&'static str, i64)>;
    /// Builds a configuration from named values; missing names take their declared defaults,
    /// and a name without default or an unknown name is an error naming the kernel.
    fn from_values(values: &[(&str, i64)]) -> Result<Self, CompileError>;
}

/// Facts about the runtime arguments that a specialization may rely on (like Triton's
/// specialization of integers divisible by 16).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Specialization {
    /// For each parameter, a power of two that divides it (integers) — 1 when unknown.
    /// Pointers are always assumed 16-byte aligned (launches check it). Empty means all 1.
    pub divisibility: Vec<u32>,
}

impl Specialization {
    /// The divisibility of the `i`-th parameter (1 when unknown).
    pub fn divisibility_of(&self, i: usize) -> u32 {
        self.divisibility.get(i).copied().unwrap_or(1)
    }
    /// The specialization a launcher derives from integer argument values: 16 when divisible
    /// by 16, else 1 (`None` for pointers and non-integers).
    pub fn from_ints(args: &[Option<i64>]) -> Specialization {
        Specialization {
            divisibility: args
                .iter()
                .map(|a| if a.is_some_and(|x| x % 16 == 0) { 16 } else { 1 })
                .collect(),
        }
    }
}

/// A kernel defined with `#[kernel]`.
pub trait KernelDef {
    /// The kernel's name.
    const NAME: &'static str;
    /// The kernel's source text (hashed into tuning-cache keys).
    const SOURCE: &'static str;
    /// The constexpr configuration.
    type Config: ConfigValues;
    /// The parameter marker types as a tuple, e.g. `(Ptr<f32>, Ptr<f32>, i32)`.
    type Params;
    /// The runtime parameters in order.
    fn params() -> Vec<ParamSpec>;
    /// Traces one specialization to tile IR.
    fn trace(config: &Self::Config, spec: &Specialization) -> Result<Kernel, CompileError>;
    /// The number of elements each pointer parameter may be accessed at, given the config
    /// and the scalar arguments (`None` for pointers without a declared extent and for scalars).
    /// `scalars[i]` is the i-th argument's value when it is an integer scalar.
    fn extents(config: &Self::Config, scalars: &[Option<i64>]) -> Vec<Option<u64>>;
}

/// A type-erased handle on a [`KernelDef`], for registries, the command line and tuning.
#[derive(Clone, Copy, Debug)]
pub struct KernelEntry {
    /// The kernel's name.
    pub name: &'static str,
    /// The kernel's source text.
    pub source: &'static str,
    /// The runtime parameters.
    pub params: fn() -> Vec<ParamSpec>,
    /// The default configuration's values (constexprs, then `num_warps`).
    pub defaults: fn() -> Vec<(&'static str, i64)>,
    /// Traces the configuration built from named values (missing names take defaults).
    pub trace: TraceFn,
}

/// Traces a kernel from named configuration values and a specialization.
pub type TraceFn = fn(&[(&str, i64)], &Specialization) -> Result<Kernel, CompileError>;

impl KernelEntry {
    /// The entry of kernel `K`, whose configuration must have defaults for every constexpr.
    pub fn of<K: KernelDef>() -> KernelEntry
    where
        K::Config: Default,
    {
        KernelEntry {
            name: K::NAME,
            source: K::SOURCE,
            params: K::params,
            defaults: || K::Config::default().values(),
            trace: |values, spec| K::trace(&K::Config::from_values(values)?, spec),
        }
    }
}
