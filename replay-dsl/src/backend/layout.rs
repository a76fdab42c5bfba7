//! Distributed layouts as bit assignments (a simple form of Triton's linear layouts).
//!
//! Every extent is a power of two, so the elements of a tile of shape `S` are named by
//! `Σ log2(S_d)` coordinate bits. A [`Layout`] assigns each register bit, each of the 5 lane
//! bits and each warp bit of a CTA to one coordinate bit, or (lanes and warps only) to nothing,
//! which means the hardware bit replicates. Every coordinate bit is covered exactly once, so a
//! thread holds `2^regs.len()` distinct elements and the coordinate of (register `r`, lane `l`,
//! warp `w`) is the OR of the coordinate bits named by the set bits of `r`, `l` and `w`.

use std::collections::HashMap;
use std::fmt;

/// Lane bits per warp.
pub const LANE_BITS: usize = 5;

/// One coordinate bit of a tile: bit `bit` of the index along dimension `dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bit {
    /// Dimension.
    pub dim: u8,
    /// Bit of the index along `dim`.
    pub bit: u8,
}

/// How a tile is distributed over the registers, lanes and warps of a CTA.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The tile shape (all extents powers of two).
    pub shape: Vec<usize>,
    /// Coordinate bit of each register-index bit (low bit first).
    pub regs: Vec<Bit>,
    /// Coordinate bit of each lane-id bit; `None` replicates.
    pub lanes: Vec<Option<Bit>>,
    /// Coordinate bit of each warp-id bit; `None` replicates.
    pub warps: Vec<Option<Bit>>,
}

fn log2(x: usize) -> u32 {
    x.trailing_zeros()
}

/// The largest power of two ≤ `x` (1 for 0).
pub fn prev_pow2(x: usize) -> usize {
    if x <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - x.leading_zeros())
    }
}

/// The coordinate bits of `shape`, fastest (last dimension, low bit) first.
fn coordinate_bits(shape: &[usize]) -> Vec<Bit> {
    let mut bits = Vec::new();
    for d in (0..shape.len()).rev() {
        for b in 0..log2(shape[d]) {
            bits.push(Bit {
                dim: d as u8,
                bit: b as u8,
            });
        }
    }
    bits
}

/// The coordinate bit at position `pos` of the row-major flat index of `shape`.
fn bit_at_flat(shape: &[usize], mut pos: u32) -> Bit {
    for d in (0..shape.len()).rev() {
        let n = log2(shape[d]);
        if pos < n {
            return Bit {
                dim: d as u8,
                bit: pos as u8,
            };
        }
        pos -= n;
    }
    unreachable!("flat bit position outside the shape")
}

impl Layout {
    /// The layout of a scalar: one register, every lane and warp replicates.
    pub fn scalar(num_warps: u32) -> Layout {
        Layout {
            shape: vec![],
            regs: vec![],
            lanes: vec![None; LANE_BITS],
            warps: vec![None; log2(num_warps as usize) as usize],
        }
    }

    /// Assigns the coordinate bits of `shape` in order: `vec` elements to registers, then
    /// lanes, then warps, then the remaining bits to registers.
    pub fn blocked(shape: &[usize], num_warps: u32, vec: usize) -> Layout {
        Layout::blocked_with(shape, num_warps, vec, false)
    }

    /// [`Layout::blocked`], or with `low_regs` the bits left after the lanes go to registers
    /// (the lowest) and warps (the highest `log2(num_warps)`), so that a dimension split between
    /// registers and warps keeps its low bits in registers: a reduction's result then has them
    /// there, and tiles whose layout is lifted from that result stay vectorised.
    pub fn blocked_with(shape: &[usize], num_warps: u32, vec: usize, low_regs: bool) -> Layout {
        let bits = coordinate_bits(shape);
        let nv = (log2(vec) as usize).min(bits.len());
        let wb = log2(num_warps as usize) as usize;
        let mut l = Layout {
            shape: shape.to_vec(),
            regs: bits[..nv].to_vec(),
            lanes: vec![None; LANE_BITS],
            warps: vec![None; wb],
        };
        let mut rest = bits[nv..].iter().copied();
        for slot in l.lanes.iter_mut() {
            *slot = rest.next();
        }
        // Only while few bits are left (at most 4 register repeats): larger tiles keep the
        // high-bits-in-registers order, whose register pressure ptxas handles better.
        if !low_regs || bits.len().saturating_sub(nv + LANE_BITS + wb) > 2 {
            for slot in l.warps.iter_mut() {
                *slot = rest.next();
            }
            l.regs.extend(rest);
            return l;
        }
        let rest: Vec<Bit> = rest.collect();
        let nreg = rest.len().saturating_sub(wb);
        l.regs.extend(&rest[..nreg]);
        for (slot, b) in l.warps.iter_mut().zip(&rest[nreg..]) {
            *slot = Some(*b);
        }
        l
    }

    /// The default layout of a tile: up to 16 bytes per thread contiguous along the last
    /// dimension (at most `max_vec` elements, and no more than `numel / threads`).
    pub fn default_for(shape: &[usize], elem_bytes: usize, num_warps: u32, max_vec: usize) -> Layout {
        Layout::default_with(shape, elem_bytes, num_warps, max_vec, false)
    }

    /// [`Layout::default_for`] built with [`Layout::blocked_with`]`(.., low_regs)`.
    pub fn default_with(shape: &[usize], elem_bytes: usize, num_warps: u32, max_vec: usize, low_regs: bool) -> Layout {
        let numel: usize = shape.iter().product();
        let threads = 32 * num_warps as usize;
        let vec = (16 / elem_bytes.max(1))
            .max(1)
            .min(max_vec.max(1))
            .min((numel / threads).max(1));
        Layout::blocked_with(shape, num_warps, prev_pow2(vec), low_regs)
    }

    /// A layout fit for a scan along `axis`: the axis' low bits in registers, the next in
    /// consecutive lanes from lane bit 0, the highest in consecutive warps from warp bit 0; the
    /// other dimensions fill the remaining lanes, warps and registers.
    pub fn for_scan(shape: &[usize], axis: usize, num_warps: u32) -> Layout {
        let wb = log2(num_warps as usize) as usize;
        let n = log2(shape[axis]) as usize;
        let nreg = n.saturating_sub(LANE_BITS + wb);
        let mut l = Layout {
            shape: shape.to_vec(),
            regs: vec![],
            lanes: vec![None; LANE_BITS],
            warps: vec![None; wb],
        };
        let axis_bits: Vec<Bit> = (0..n)
            .map(|b| Bit {
                dim: axis as u8,
                bit: b as u8,
            })
            .collect();
        l.regs.extend(&axis_bits[..nreg]);
        let mut rest = axis_bits[nreg..].iter().copied();
        let nl = (n - nreg).min(LANE_BITS);
        for slot in &mut l.lanes[..nl] {
            *slot = rest.next();
        }
        for slot in l.warps.iter_mut() {
            *slot = rest.next();
            if slot.is_none() {
                break;
            }
        }
        let mut others = coordinate_bits(shape).into_iter().filter(|b| b.dim as usize != axis);
        for slot in l.lanes.iter_mut().chain(l.warps.iter_mut()) {
            if slot.is_none() {
                *slot = others.next();
            }
        }
        l.regs.extend(others);
        l
    }

    /// True if the bits of `axis` are, from low to high coordinate bit: registers, then
    /// consecutive increasing lane bits, then consecutive increasing warp bits (what the scan
    /// lowering needs).
    pub fn is_scan_compatible(&self, axis: usize) -> bool {
        let on = |b: &Option<Bit>| b.is_some_and(|b| b.dim as usize == axis);
        let nreg = self.regs.iter().filter(|b| b.dim as usize == axis).count();
        if self
            .regs
            .iter()
            .any(|b| b.dim as usize == axis && b.bit as usize >= nreg)
        {
            return false;
        }
        let mut next = nreg;
        for group in [&self.lanes, &self.warps] {
            let pos: Vec<usize> = (0..group.len()).filter(|&i| on(&group[i])).collect();
            for (k, &i) in pos.iter().enumerate() {
                if i != pos[0] + k || group[i].map(|b| b.bit as usize) != Some(next) {
                    return false;
                }
                next += 1;
            }
        }
        true
    }

    /// Registers per thread.
    pub fn num_regs(&self) -> usize {
        1 << self.regs.len()
    }

    /// Number of elements of the tile.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The register-dependent part of the coordinate along `dim` for register `r`.
    pub fn reg_coord(&self, r: usize, dim: usize) -> usize {
        let mut c = 0;
        for (i, b) in self.regs.iter().enumerate() {
            if r >> i & 1 == 1 && b.dim as usize == dim {
                c |= 1 << b.bit;
            }
        }
        c
    }

    /// The lane-dependent part of the coordinate along `dim` for lane `lane` (replicating lane
    /// bits add nothing).
    pub fn lane_coord(&self, lane: usize, dim: usize) -> usize {
        let mut c = 0;
        for (i, b) in self.lanes.iter().enumerate() {
            if let Some(b) = b.filter(|b| lane >> i & 1 == 1 && b.dim as usize == dim) {
                c |= 1 << b.bit;
            }
        }
        c
    }

    /// Position of a coordinate bit in the row-major flat index.
    pub fn flat_shift(&self, bit: Bit) -> u32 {
        let d = bit.dim as usize;
        self.shape[d + 1..].iter().map(|&e| log2(e)).sum::<u32>() + bit.bit as u32
    }

    /// The register-dependent part of the row-major flat index for register `r`.
    pub fn reg_flat(&self, r: usize) -> usize {
        let mut c = 0;
        for (i, b) in self.regs.iter().enumerate() {
            if r >> i & 1 == 1 {
                c |= 1 << self.flat_shift(*b);
            }
        }
        c
    }

    /// `(thread-id bit, coordinate bit)` for every lane and warp bit that is not replicated.
    pub fn thread_bits(&self) -> Vec<(u32, Bit)> {
        let lanes = self
            .lanes
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.map(|b| (i as u32, b)));
        let warps = self
            .warps
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.map(|b| ((LANE_BITS + i) as u32, b)));
        lanes.chain(warps).collect()
    }

    /// The thread-id bits that replicate (a thread owns the canonical copy of its elements when
    /// these bits of its id are zero).
    pub fn replicated_tid_mask(&self) -> u32 {
        let lanes = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, b)| b.is_none())
            .map(|(i, _)| 1u32 << i);
        let warps = self
            .warps
            .iter()
            .enumerate()
            .filter(|(_, b)| b.is_none())
            .map(|(i, _)| 1u32 << (LANE_BITS + i));
        lanes.chain(warps).fold(0, |a, b| a | b)
    }

    /// `2^k` where register bits `0..k` are bits `0..k` of the last dimension: the number of
    /// consecutive elements along the last dimension held in consecutive registers.
    pub fn contiguous_regs(&self) -> usize {
        let Some(last) = self.shape.len().checked_sub(1) else {
            return 1;
        };
        let k = self
            .regs
            .iter()
            .enumerate()
            .take_while(|(i, b)| b.dim as usize == last && b.bit as usize == *i)
            .count();
        1 << k
    }

    fn map_bits(&self, shape: Vec<usize>, f: impl Fn(Bit) -> Option<Bit>) -> Layout {
        Layout {
            shape,
            regs: self.regs.iter().filter_map(|b| f(*b)).collect(),
            lanes: self.lanes.iter().map(|b| b.and_then(&f)).collect(),
            warps: self.warps.iter().map(|b| b.and_then(&f)).collect(),
        }
    }

    /// The layout of a broadcast's source: the same layout with the bits of `dims` removed
    /// (those dimensions have extent 1 in `src_shape`; lanes and warps that held them replicate).
    pub fn without_dims(&self, dims: &[usize], src_shape: &[usize]) -> Layout {
        self.map_bits(src_shape.to_vec(), |b| (!dims.contains(&(b.dim as usize))).then_some(b))
    }

    /// For each register of this layout, the register of [`Layout::without_dims`] (or of
    /// [`Layout::slice`] for one dimension) holding the same element after dropping `dims`.
    pub fn reg_map_dropping(&self, dims: &[usize]) -> Vec<usize> {
        let keep: Vec<usize> = (0..self.regs.len())
            .filter(|&i| !dims.contains(&(self.regs[i].dim as usize)))
            .collect();
        (0..self.num_regs())
            .map(|r| {
                keep.iter()
                    .enumerate()
                    .fold(0, |acc, (j, &i)| acc | ((r >> i & 1) << j))
            })
            .collect()
    }

    /// The layout of a reduction along `axis`: its bits removed and the dimension deleted.
    pub fn slice(&self, axis: usize) -> Layout {
        let mut shape = self.shape.clone();
        shape.remove(axis);
        self.map_bits(shape, |b| match (b.dim as usize).cmp(&axis) {
            std::cmp::Ordering::Less => Some(b),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(Bit {
                dim: b.dim - 1,
                bit: b.bit,
            }),
        })
    }

    /// The layout of a reduction along `axis` that scatters its result over the lanes that
    /// held `axis`: [`Layout::slice`] with its highest register bits moved, one per lane bit of
    /// `axis` (lowest lane bit first), into those lanes. The reduction then halves its
    /// registers at every such lane bit (one shuffle per pair) instead of reducing every
    /// register across every lane, and the result is replicated on fewer lanes.
    pub fn scatter_slice(&self, axis: usize) -> Layout {
        let mut out = self.slice(axis);
        for (i, b) in self.lanes.iter().enumerate() {
            if b.is_some_and(|b| b.dim as usize == axis) {
                match out.regs.pop() {
                    Some(r) => out.lanes[i] = Some(r),
                    None => break,
                }
            }
        }
        out
    }

    /// The layout after inserting a size-1 dimension at `axis` (`expand_dims`).
    pub fn insert_dim(&self, axis: usize) -> Layout {
        let mut shape = self.shape.clone();
        shape.insert(axis, 1);
        self.map_bits(shape, |b| {
            Some(if b.dim as usize >= axis {
                Bit {
                    dim: b.dim + 1,
                    bit: b.bit,
                }
            } else {
                b
            })
        })
    }

    /// The inverse of [`Layout::insert_dim`]: deletes the size-1 dimension `axis`.
    pub fn delete_dim(&self, axis: usize) -> Layout {
        self.slice(axis)
    }

    /// The layout of the 2-D transpose (dimensions swapped; registers unchanged).
    pub fn transposed(&self) -> Layout {
        self.map_bits(vec![self.shape[1], self.shape[0]], |b| {
            Some(Bit {
                dim: 1 - b.dim,
                bit: b.bit,
            })
        })
    }

    /// The same distribution of row-major elements viewed with another shape (`reshape`).
    pub fn reshaped(&self, shape: &[usize]) -> Layout {
        self.map_bits(shape.to_vec(), |b| Some(bit_at_flat(shape, self.flat_shift(b))))
    }
}

impl fmt::Display for Bit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d{}.{}", self.dim, self.bit)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |bits: &[Option<Bit>]| -> String {
            bits.iter()
                .map(|b| b.map_or("-".to_string(), |b| b.to_string()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let regs: Vec<Option<Bit>> = self.regs.iter().copied().map(Some).collect();
        write!(
            f,
            "{:?} regs[{}] lanes[{}] warps[{}]",
            self.shape,
            show(&regs),
            show(&self.lanes),
            show(&self.warps)
        )
    }
}

/// Index of an interned layout in a [`LayoutTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LayoutId(pub u32);

/// Interns layouts so that they compare and hash as small ids.
#[derive(Clone, Debug, Default)]
pub struct LayoutTable {
    list: Vec<Layout>,
    ids: HashMap<Layout, LayoutId>,
}

impl LayoutTable {
    /// The id of `layout`, interning it if new.
    pub fn intern(&mut self, layout: Layout) -> LayoutId {
        if let Some(id) = self.ids.get(&layout) {
            return *id;
        }
        let id = LayoutId(self.list.len() as u32);
        self.list.push(layout.clone());
        self.ids.insert(layout, id);
        id
    }
    /// The layout with this id.
    pub fn get(&self, id: LayoutId) -> &Layout {
        &self.list[id.0 as usize]
    }
    /// Every interned layout with its id.
    pub fn iter(&self) -> impl Iterator<Item = (LayoutId, &Layout)> {
        self.list.iter().enumerate().map(|(i, l)| (LayoutId(i as u32), l))
    }
}

/// How to convert between two layouts inside each warp (a `shfl.sync.idx` per target register, or a register selection).
#[derive(Debug, PartialEq, Eq)]
pub struct InWarpPlan {
    /// Per register of the target layout: the source register and the constant part of the
    /// source lane.
    pub regs: Vec<(usize, u32)>,
    /// `(thread-id bit, source-lane bit)`: the thread-dependent part of the source lane.
    pub dynamic: Vec<(u32, u32)>,
    /// True if every thread reads its own registers (no shuffle).
    pub local: bool,
}

/// The in-warp conversion plan from `from` to `to`, if one exists: every coordinate bit held by
/// a warp bit of `from` is held by the same warp bit of `to`, and every coordinate bit held by a
/// register of `from` is held by a register of `to`.
pub fn in_warp_plan(from: &Layout, to: &Layout) -> Option<InWarpPlan> {
    if from.shape != to.shape || from.warps.len() != to.warps.len() {
        return None;
    }
    for (w, b) in from.warps.iter().enumerate() {
        if b.is_some() && to.warps[w] != *b {
            return None;
        }
    }
    let to_reg = |c: Bit| to.regs.iter().position(|b| *b == c);
    let to_thread = |c: Bit| -> Option<u32> {
        if let Some(t) = to.lanes.iter().position(|b| *b == Some(c)) {
            return Some(t as u32);
        }
        to.warps
            .iter()
            .position(|b| *b == Some(c))
            .map(|w| (LANE_BITS + w) as u32)
    };
    if from.regs.iter().any(|c| to_reg(*c).is_none()) {
        return None;
    }
    // Thread-dependent source-lane bits.
    let mut dynamic = Vec::new();
    for (j, b) in from.lanes.iter().enumerate() {
        if let Some(c) = b {
            if to_reg(*c).is_none() {
                dynamic.push((to_thread(*c)?, j as u32));
            }
        }
    }
    let mut regs = Vec::with_capacity(to.num_regs());
    let mut local = dynamic.iter().all(|(t, j)| t == j);
    for r in 0..to.num_regs() {
        let has = |c: Bit| to_reg(c).is_some_and(|i| r >> i & 1 == 1);
        let rho = from
            .regs
            .iter()
            .enumerate()
            .fold(0, |acc, (i, c)| acc | (usize::from(has(*c)) << i));
        let lane = from
            .lanes
            .iter()
            .enumerate()
            .fold(0u32, |acc, (j, b)| acc | (u32::from(b.is_some_and(has)) << j));
        local &= lane == 0;
        regs.push((rho, lane));
    }
    Some(InWarpPlan { regs, dynamic, local })
}
