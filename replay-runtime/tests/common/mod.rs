//! A hand-written `add` kernel, shaped like what `#[kernel]` generates, for tests of the
//! launch path and the tuner on the interpreter.

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{CmpOp, Kernel, Param};
use replay_dsl::prelude::*;
use replay_dsl::{CompileError, ConfigValues, DType, Elem, ErrorKind, KernelDef, ParamSpec, Specialization};

/// `out[i] = x[i] + y[i]` for `i < n`; `BUG = 1` computes `x[i] - y[i]`, `BUG = 2` stores
/// without the mask (out of bounds past `n`).
pub struct Add;

/// Configuration of [`Add`].
#[derive(Clone, Debug, PartialEq)]
pub struct AddConfig {
    pub block: i64,
    pub bug: i64,
    pub num_warps: i64,
}

impl Default for AddConfig {
    fn default() -> Self {
        AddConfig {
            block: 64,
            bug: 0,
            num_warps: 4,
        }
    }
}

impl ConfigValues for AddConfig {
    fn values(&self) -> Vec<(&'static str, i64)> {
        vec![("BLOCK", self.block), ("BUG", self.bug), ("num_warps", self.num_warps)]
    }
    fn from_values(values: &[(&str, i64)]) -> Result<Self, CompileError> {
        let mut c = AddConfig::default();
        for (n, v) in values {
            match *n {
                "BLOCK" => c.block = *v,
                "BUG" => c.bug = *v,
                "num_warps" => c.num_warps = *v,
                other => {
                    return Err(CompileError::new(
                        "add",
                        "config",
                        ErrorKind::Constexpr(format!("unknown constexpr `{other}`")),
                    ))
                }
            }
        }
        Ok(c)
    }
}

impl KernelDef for Add {
    const NAME: &'static str = "add";
    const SOURCE: &'static str = "out[i] = x[i] + y[i]";
    type Config = AddConfig;
    type Params = (Ptr<f32>, Ptr<f32>, Ptr<f32>, i32);

    fn params() -> Vec<ParamSpec> {
        vec![
            ParamSpec {
                name: "x",
                dtype: DType::Ptr(Elem::F32),
            },
            ParamSpec {
                name: "y",
                dtype: DType::Ptr(Elem::F32),
            },
            ParamSpec {
                name: "out",
                dtype: DType::Ptr(Elem::F32),
            },
            ParamSpec {
                name: "n",
                dtype: DType::Val(Elem::I32),
            },
        ]
    }

    fn trace(config: &AddConfig, spec: &Specialization) -> Result<Kernel, CompileError> {
        let params = Self::params()
            .into_iter()
            .enumerate()
            .map(|(i, p)| Param {
                name: p.name.to_string(),
                dtype: p.dtype,
                divisibility: spec.divisibility_of(i),
            })
            .collect();
        let block = config.block as usize;
        let bug = config.bug == 1;
        let unmasked = config.bug == 2;
        let constexprs = vec![("BLOCK".to_string(), config.block), ("BUG".to_string(), config.bug)];
        trace("add", params, constexprs, config.num_warps as u32, |a| {
            let x = Tile::<Ptr<f32>>::from_value(a[0]);
            let y = Tile::<Ptr<f32>>::from_value(a[1]);
            let out = Tile::<Ptr<f32>>::from_value(a[2]);
            let n = Tile::<i32>::from_value(a[3]);
            let offs = program_id(0) * block + arange(block);
            let mask = offs.compare(CmpOp::Lt, n);
            let (xv, yv) = (load(x + offs, mask), load(y + offs, mask));
            let v = if bug { xv - yv } else { xv + yv };
            if unmasked {
                store(out + offs, v, true);
            } else {
                store(out + offs, v, mask);
            }
        })
    }

    fn extents(_: &AddConfig, scalars: &[Option<i64>]) -> Vec<Option<u64>> {
        let n = scalars.get(3).copied().flatten().map(|n| n.max(0) as u64);
        vec![n, n, n, None]
    }
}
