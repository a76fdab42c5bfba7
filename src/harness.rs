//! Runs one problem instance of a kernel on a device and judges its outputs.
//!
//! An [`Instance`] holds host data for every buffer (or nothing, for outputs that are poisoned
//! with `0xFF` bytes — NaN for floats, −1 for integers — before each launch), the launch
//! arguments and grid. [`OutputCheck`]s say, element by element, what each output must hold:
//! a float64 reference value (with a relative or absolute bound), an exact integer, or its
//! initial bits (padding a correct kernel must leave alone). [`judge`] turns outputs and checks
//! into a [`Verdict`]: relative ‖out − ref‖₂ / ‖ref‖₂, the largest elementwise relative error,
//! unwritten and clobbered elements; NaN never passes.

use replay_dsl::{Elem, KernelDef};
use replay_runtime::{ArgValue, CompiledKernel, Device, Engine, Grid, RawBuffer, RuntimeError, Stream};

/// Named integer values: a configuration (`BLOCK`, …, `num_warps`) or a problem shape.
pub type Named = Vec<(&'static str, i64)>;

/// The value called `name` in `values` (0 when absent).
pub fn get(values: &[(&'static str, i64)], name: &str) -> i64 {
    values.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

/// `a=1 b=2` (with `num_warps` shown as `warps`).
pub fn show(values: &[(&'static str, i64)]) -> String {
    values
        .iter()
        .map(|(n, v)| {
            let n = if *n == "num_warps" { "warps" } else { n };
            format!("{n}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Host data of one buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// `f32` elements.
    F32(Vec<f32>),
    /// `i32` elements.
    I32(Vec<i32>),
}

impl HostData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element type.
    pub fn elem(&self) -> Elem {
        match self {
            HostData::F32(_) => Elem::F32,
            HostData::I32(_) => Elem::I32,
        }
    }
    /// Little-endian bytes, as device memory holds them.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            HostData::F32(v) => replay_runtime::elem::encode(v),
            HostData::I32(v) => replay_runtime::elem::encode(v),
        }
    }
    /// Decodes `bytes` as elements of `elem` (f32 or i32).
    pub fn from_bytes(elem: Elem, bytes: &[u8]) -> HostData {
        match elem {
            Elem::I32 => HostData::I32(replay_runtime::elem::decode(bytes)),
            _ => HostData::F32(replay_runtime::elem::decode(bytes)),
        }
    }
    /// The `f32` elements (empty for other types).
    pub fn f32s(&self) -> &[f32] {
        match self {
            HostData::F32(v) => v,
            _ => &[],
        }
    }
    /// The `i32` elements (empty for other types).
    pub fn i32s(&self) -> &[i32] {
        match self {
            HostData::I32(v) => v,
            _ => &[],
        }
    }
    /// The raw bits of element `i` (f32 bits, or the i32 as u32).
    fn bits(&self, i: usize) -> u32 {
        match self {
            HostData::F32(v) => v[i].to_bits(),
            HostData::I32(v) => v[i] as u32,
        }
    }
    fn value(&self, i: usize) -> f64 {
        match self {
            HostData::F32(v) => v[i] as f64,
            HostData::I32(v) => v[i] as f64,
        }
    }
}

/// One buffer of an instance.
#[derive(Clone, Debug)]
pub struct BufSpec {
    /// Parameter name.
    pub name: &'static str,
    /// Element type.
    pub elem: Elem,
    /// Number of elements (may exceed the kernel's extent: slack that must stay untouched).
    pub len: usize,
    /// Initial contents; `None` poisons the buffer with `0xFF` bytes before every launch.
    pub data: Option<HostData>,
}

impl BufSpec {
    /// An input (or in-out) buffer holding `data`.
    pub fn data(name: &'static str, data: HostData) -> BufSpec {
        BufSpec {
            name,
            elem: data.elem(),
            len: data.len(),
            data: Some(data),
        }
    }
    /// An output buffer, poisoned before each launch.
    pub fn poisoned(name: &'static str, elem: Elem, len: usize) -> BufSpec {
        BufSpec {
            name,
            elem,
            len,
            data: None,
        }
    }
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        (self.len * self.elem.bytes()) as u64
    }
    /// The initial bits of element `i`.
    fn initial_bits(&self, i: usize) -> u32 {
        match &self.data {
            Some(d) => d.bits(i),
            None => u32::MAX,
        }
    }
}

/// A launch argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// The instance's buffer with this index.
    Buf(usize),
    /// An `i32` scalar.
    I32(i32),
    /// An `f32` scalar.
    F32(f32),
}

/// A problem instance: buffers, arguments in parameter order, grid, and its cost.
#[derive(Clone, Debug)]
pub struct Instance {
    /// The shape, for tables (`n=1000003`).
    pub shape: String,
    /// The buffers.
    pub bufs: Vec<BufSpec>,
    /// Arguments in parameter order.
    pub args: Vec<Arg>,
    /// The launch grid.
    pub grid: Grid,
    /// The fewest bytes a launch must move (each input read once, each output written once).
    pub min_bytes: u64,
    /// Floating-point operations of one launch (0 where not meaningful).
    pub flops: u64,
}

impl Instance {
    /// The integer arguments, as specializations see them.
    pub fn ints(&self) -> Vec<Option<i64>> {
        self.args
            .iter()
            .map(|a| match a {
                Arg::I32(v) => Some(*v as i64),
                _ => None,
            })
            .collect()
    }
    /// The initial contents of buffer `i` (an input; panics for a poisoned output).
    pub fn host(&self, i: usize) -> &HostData {
        let b = &self.bufs[i];
        b.data
            .as_ref()
            .unwrap_or_else(|| panic!("{} is a poisoned output", b.name))
    }
    /// Total bytes of all buffers.
    pub fn buffer_bytes(&self) -> u64 {
        self.bufs.iter().map(BufSpec::bytes).sum()
    }
}

/// What one output element must hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expect {
    /// This reference value, within the check's relative elementwise bound (if any).
    Value(f64),
    /// This reference value, within an absolute bound (a rigorous rounding-error bound, e.g.
    /// `k·u·Σ|a||b|` for a dot product of length `k`).
    Within(f64, f64),
    /// Exactly this integer.
    Exact(i64),
    /// Its initial bits (padding or slack a correct kernel never writes).
    Untouched,
}

/// Tolerances of one output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// Bound on ‖out − ref‖₂ / ‖ref‖₂ over the checked values.
    pub norm: f64,
    /// Bound on |out − ref| / |ref| per element, where meaningful.
    pub elem: Option<f64>,
}

impl Tol {
    /// The norm bound for a float type: f32 1e-5, f16 1e-3, bf16 1e-2, fp8 1e-1; integers 0.
    pub fn norm_for(elem: Elem) -> f64 {
        match elem {
            Elem::F32 => 1e-5,
            Elem::F16 => 1e-3,
            Elem::BF16 => 1e-2,
            Elem::F8E4M3 => 1e-1,
            _ => 0.0,
        }
    }
    /// The norm bound of `elem`, no elementwise bound.
    pub fn norm(elem: Elem) -> Tol {
        Tol {
            norm: Tol::norm_for(elem),
            elem: None,
        }
    }
    /// The norm bound of `elem` and the same bound elementwise.
    pub fn elementwise(elem: Elem) -> Tol {
        Tol {
            norm: Tol::norm_for(elem),
            elem: Some(Tol::norm_for(elem)),
        }
    }
}

/// What one output buffer must hold: `(element index, expectation)` pairs (the elements not
/// listed are not checked: benchmarks check a sample of rows).
#[derive(Clone, Debug)]
pub struct OutputCheck {
    /// Index of the buffer in [`Instance::bufs`].
    pub buf: usize,
    /// The checked elements.
    pub entries: Vec<(usize, Expect)>,
    /// Tolerances.
    pub tol: Tol,
}

/// The judgement of one launch's outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// ‖out − ref‖₂ / ‖ref‖₂ over the float reference values (0 when none).
    pub rel_l2: f64,
    /// Largest |out − ref| / |ref| over [`Expect::Value`] elements.
    pub max_rel: f64,
    /// Largest |out − ref| / bound over [`Expect::Within`] elements (≤ 1 passes).
    pub max_bound: f64,
    /// Elements compared against [`Expect::Value`].
    pub values: usize,
    /// Elements compared against [`Expect::Within`].
    pub withins: usize,
    /// Elements compared against [`Expect::Exact`].
    pub exacts: usize,
    /// Elements checked.
    pub checked: usize,
    /// Elements that should have been written but still hold the poison.
    pub unwritten: usize,
    /// Elements that should not have been written but were.
    pub clobbered: usize,
    /// Elements out of their bound (NaN, infinity, wrong integer, elementwise error).
    pub bad: usize,
    /// Index `(buffer, element)` of the first failing element.
    pub first_bad: Option<(usize, usize)>,
    /// True when everything is within bounds.
    pub pass: bool,
}

impl Verdict {
    /// The largest elementwise error, as a table shows it: relative error where the check has
    /// reference values, the fraction of the rounding-error bound used where it has bounds,
    /// `exact` for integers.
    pub fn max_err_text(&self) -> String {
        let mut parts = Vec::new();
        if self.values > 0 {
            parts.push(crate::table::err(self.max_rel));
        }
        if self.withins > 0 {
            parts.push(format!("{:.2} of bound", self.max_bound));
        }
        if self.exacts > 0 {
            parts.push(if self.bad == 0 {
                "exact".into()
            } else {
                format!("{} wrong", self.bad)
            });
        }
        if parts.is_empty() {
            parts.push("-".into());
        }
        parts.join(", ")
    }

    /// Merges the verdicts of several outputs (the worst of each measure).
    pub fn merge(self, o: Verdict) -> Verdict {
        Verdict {
            rel_l2: self.rel_l2.max(o.rel_l2),
            max_rel: self.max_rel.max(o.max_rel),
            max_bound: self.max_bound.max(o.max_bound),
            values: self.values + o.values,
            withins: self.withins + o.withins,
            exacts: self.exacts + o.exacts,
            checked: self.checked + o.checked,
            unwritten: self.unwritten + o.unwritten,
            clobbered: self.clobbered + o.clobbered,
            bad: self.bad + o.bad,
            first_bad: self.first_bad.or(o.first_bad),
            pass: self.pass && o.pass,
        }
    }
}

/// Judges `out` (the contents of buffer `check.buf` of `inst`) against `check`.
pub fn judge_one(inst: &Instance, check: &OutputCheck, out: &HostData) -> Verdict {
    let spec = &inst.bufs[check.buf];
    let mut v = Verdict {
        pass: true,
        ..Verdict::default()
    };
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    let fail = |v: &mut Verdict, i: usize| {
        v.bad += 1;
        v.first_bad.get_or_insert((check.buf, i));
    };
    for &(i, e) in &check.entries {
        if i >= out.len() {
            fail(&mut v, i);
            continue;
        }
        v.checked += 1;
        let bits = out.bits(i);
        let poisoned = spec.data.is_none() && bits == u32::MAX;
        match e {
            Expect::Untouched => {
                if bits != spec.initial_bits(i) {
                    v.clobbered += 1;
                    v.first_bad.get_or_insert((check.buf, i));
                }
            }
            Expect::Exact(x) => {
                v.exacts += 1;
                if poisoned {
                    v.unwritten += 1;
                    v.first_bad.get_or_insert((check.buf, i));
                } else if out.value(i) != x as f64 {
                    fail(&mut v, i);
                }
            }
            Expect::Value(r) | Expect::Within(r, _) => {
                match e {
                    Expect::Within(..) => v.withins += 1,
                    _ => v.values += 1,
                }
                let o = out.value(i);
                if poisoned {
                    v.unwritten += 1;
                    v.first_bad.get_or_insert((check.buf, i));
                    continue;
                }
                if !o.is_finite() {
                    // NaN never passes; infinities only where the reference has them.
                    if o != r {
                        fail(&mut v, i);
                        v.max_rel = f64::INFINITY;
                        v.max_bound = f64::INFINITY;
                    }
                    continue;
                }
                let d = (o - r).abs();
                diff2 += d * d;
                ref2 += r * r;
                let ok = match e {
                    Expect::Within(_, abs) => {
                        v.max_bound = v.max_bound.max(if abs > 0.0 {
                            d / abs
                        } else if d > 0.0 {
                            f64::INFINITY
                        } else {
                            0.0
                        });
                        d <= abs
                    }
                    _ => {
                        let rel = d / r.abs().max(f32::MIN_POSITIVE as f64);
                        v.max_rel = v.max_rel.max(rel);
                        check.tol.elem.is_none_or(|t| rel <= t)
                    }
                };
                if !ok {
                    fail(&mut v, i);
                }
            }
        }
    }
    v.rel_l2 = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else if diff2 > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    if v.rel_l2 > check.tol.norm || v.rel_l2.is_nan() {
        v.pass = false;
    }
    if v.bad > 0 || v.unwritten > 0 || v.clobbered > 0 {
        v.pass = false;
    }
    v
}

/// Judges every output of `inst`; `outs[i]` holds buffer `checks[i].buf`'s contents.
pub fn judge(inst: &Instance, checks: &[OutputCheck], outs: &[HostData]) -> Verdict {
    checks.iter().zip(outs).map(|(c, o)| judge_one(inst, c, o)).fold(
        Verdict {
            pass: true,
            ..Verdict::default()
        },
        Verdict::merge,
    )
}

/// A compiled kernel with the type erased: what the harness launches.
pub trait Launcher {
    /// Launches over `grid` with arguments checked at run time against the parameters.
    fn launch(&self, stream: &Stream, grid: Grid, args: &[ArgValue<'_>]) -> Result<(), RuntimeError>;
}

impl<K: KernelDef> Launcher for CompiledKernel<K> {
    fn launch(&self, stream: &Stream, grid: Grid, args: &[ArgValue<'_>]) -> Result<(), RuntimeError> {
        self.launch_values(stream, grid, args, Engine::Device)
    }
}

/// Compiles kernel `K` with the configuration `values` (missing names take defaults).
pub fn compile_as<K: KernelDef + 'static>(
    device: &Device,
    values: &[(&'static str, i64)],
) -> Result<Box<dyn Launcher>, RuntimeError> {
    let config = <K::Config as replay_dsl::ConfigValues>::from_values(values)?;
    Ok(Box::new(replay_runtime::compile::<K>(device, config)?))
}

/// An instance's buffers on a device.
pub struct Loaded {
    /// One buffer per [`BufSpec`].
    pub bufs: Vec<RawBuffer>,
}

impl Loaded {
    /// Allocates the buffers and writes their initial contents (or the poison).
    pub fn new(stream: &Stream, inst: &Instance) -> Result<Loaded, RuntimeError> {
        let mut bufs = Vec::with_capacity(inst.bufs.len());
        for b in &inst.bufs {
            bufs.push(RawBuffer::zeros(stream, b.elem, b.len)?);
        }
        let l = Loaded { bufs };
        l.reset(stream, inst)?;
        Ok(l)
    }

    /// Rewrites the initial contents and the poison.
    pub fn reset(&self, stream: &Stream, inst: &Instance) -> Result<(), RuntimeError> {
        for (b, spec) in self.bufs.iter().zip(&inst.bufs) {
            match &spec.data {
                Some(d) => b.write_bytes(stream, &d.to_bytes())?,
                None => b.fill_byte(stream, 0xFF)?,
            }
        }
        Ok(())
    }

    /// The launch arguments.
    pub fn args(&self, inst: &Instance) -> Vec<ArgValue<'_>> {
        inst.args
            .iter()
            .map(|a| match *a {
                Arg::Buf(i) => ArgValue::Buffer(&self.bufs[i]),
                Arg::I32(v) => ArgValue::I32(v),
                Arg::F32(v) => ArgValue::F32(v),
            })
            .collect()
    }

    /// Reads back the buffers that `checks` look at, in the order of `checks`.
    pub fn read(&self, stream: &Stream, checks: &[OutputCheck]) -> Result<Vec<HostData>, RuntimeError> {
        checks
            .iter()
            .map(|c| {
                let b = &self.bufs[c.buf];
                Ok(HostData::from_bytes(b.elem(), &b.read_bytes(stream)?))
            })
            .collect()
    }
}

/// Resets `inst`'s buffers, launches once, waits for the launch (so that a fault shows here)
/// and judges the outputs.
pub fn run_and_judge(
    kernel: &dyn Launcher,
    stream: &Stream,
    inst: &Instance,
    loaded: &Loaded,
    checks: &[OutputCheck],
) -> Result<Verdict, RuntimeError> {
    loaded.reset(stream, inst)?;
    kernel.launch(stream, inst.grid, &loaded.args(inst))?;
    stream.synchronize()?;
    let outs = loaded.read(stream, checks)?;
    Ok(judge(inst, checks, &outs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(data: Option<HostData>) -> Instance {
        Instance {
            shape: "n=3".into(),
            bufs: vec![match data {
                Some(d) => BufSpec::data("out", d),
                None => BufSpec::poisoned("out", Elem::F32, 3),
            }],
            args: vec![Arg::Buf(0)],
            grid: Grid::from(1),
            min_bytes: 12,
            flops: 0,
        }
    }

    fn check(entries: Vec<(usize, Expect)>) -> OutputCheck {
        OutputCheck {
            buf: 0,
            entries,
            tol: Tol::elementwise(Elem::F32),
        }
    }

    #[test]
    fn verdicts() {
        let i = inst(None);
        let c = check(vec![
            (0, Expect::Value(1.0)),
            (1, Expect::Value(2.0)),
            (2, Expect::Untouched),
        ]);
        let poison = f32::from_bits(u32::MAX);
        let good = judge(&i, std::slice::from_ref(&c), &[HostData::F32(vec![1.0, 2.0, poison])]);
        assert!(good.pass, "{good:?}");
        assert_eq!(good.checked, 3);
        let unwritten = judge(
            &i,
            std::slice::from_ref(&c),
            &[HostData::F32(vec![1.0, poison, poison])],
        );
        assert!(!unwritten.pass);
        assert_eq!(unwritten.unwritten, 1);
        assert_eq!(unwritten.first_bad, Some((0, 1)));
        let clobbered = judge(&i, std::slice::from_ref(&c), &[HostData::F32(vec![1.0, 2.0, 0.0])]);
        assert_eq!(clobbered.clobbered, 1);
        assert!(!clobbered.pass);
        let nan = judge(
            &i,
            std::slice::from_ref(&c),
            &[HostData::F32(vec![f32::NAN, 2.0, poison])],
        );
        assert!(!nan.pass);
        let off = judge(&i, &[c], &[HostData::F32(vec![1.001, 2.0, poison])]);
        assert!(!off.pass);
        assert!((off.max_rel - 1e-3).abs() < 1e-6);
    }

    #[test]
    fn exact_and_within() {
        let i = inst(Some(HostData::I32(vec![5, 6, 7])));
        let c = OutputCheck {
            buf: 0,
            entries: vec![(0, Expect::Exact(5)), (2, Expect::Untouched)],
            tol: Tol::norm(Elem::I32),
        };
        assert!(judge(&i, std::slice::from_ref(&c), &[HostData::I32(vec![5, 0, 7])]).pass);
        assert!(!judge(&i, &[c], &[HostData::I32(vec![4, 0, 7])]).pass);
        let f = inst(None);
        let c = OutputCheck {
            buf: 0,
            entries: vec![(0, Expect::Within(1.0, 0.5))],
            tol: Tol { norm: 1.0, elem: None },
        };
        assert!(judge(&f, std::slice::from_ref(&c), &[HostData::F32(vec![1.4, 0.0, 0.0])]).pass);
        assert!(!judge(&f, &[c], &[HostData::F32(vec![1.6, 0.0, 0.0])]).pass);
    }

    #[test]
    fn names() {
        let v: Named = vec![("BLOCK", 1024), ("num_warps", 4)];
        assert_eq!(show(&v), "BLOCK=1024 warps=4");
        assert_eq!(get(&v, "BLOCK"), 1024);
        assert_eq!(get(&v, "nope"), 0);
    }
}
