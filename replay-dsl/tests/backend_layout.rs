//! Unit tests of the backend's layouts, layout assignment and axis analysis.

use replay_dsl::backend::assign::{Assignment, Kind};
use replay_dsl::backend::axis::{AxisTable, MAX_DIV};
use replay_dsl::backend::layout::{in_warp_plan, Bit, Layout, LANE_BITS};
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{walk_insts, CmpOp, Kernel, Op, Param, Value};
use replay_dsl::prelude::*;
use replay_dsl::{DType, Elem};
use std::collections::HashSet;

fn b(dim: u8, bit: u8) -> Bit {
    Bit { dim, bit }
}

/// Every element of the tile is held by some (register, lane, warp), each register distinct.
fn coords(l: &Layout, num_warps: usize) -> Vec<Vec<Vec<usize>>> {
    let mut out = Vec::new();
    for t in 0..32 * num_warps {
        let mut regs = Vec::new();
        for r in 0..l.num_regs() {
            let mut c: Vec<usize> = (0..l.shape.len()).map(|d| l.reg_coord(r, d)).collect();
            for (hw, bit) in l.thread_bits() {
                if t >> hw & 1 == 1 {
                    c[bit.dim as usize] |= 1 << bit.bit;
                }
            }
            regs.push(c);
        }
        out.push(regs);
    }
    out
}

#[test]
fn default_layout_coordinate_map() {
    // f32[1024] on 4 warps: 4 contiguous elements per register group, lanes, warps, then repeat.
    let l = Layout::default_for(&[1024], 4, 4, 16);
    assert_eq!(l.regs, vec![b(0, 0), b(0, 1), b(0, 9)]);
    assert_eq!(l.lanes, (2..7).map(|i| Some(b(0, i))).collect::<Vec<_>>());
    assert_eq!(l.warps, vec![Some(b(0, 7)), Some(b(0, 8))]);
    let c = coords(&l, 4);
    assert_eq!(c[0][..4], [vec![0], vec![1], vec![2], vec![3]]);
    assert_eq!(c[1][0], vec![4]);
    assert_eq!(c[32][0], vec![128]);
    assert_eq!(c[0][4], vec![512]);
    let all: HashSet<Vec<usize>> = c.into_iter().flatten().collect();
    assert_eq!(all.len(), 1024);
    assert_eq!(l.contiguous_regs(), 4);
    assert_eq!(l.replicated_tid_mask(), 0);
    // A tile smaller than the CTA replicates over the leftover warps.
    let s = Layout::default_for(&[64], 4, 4, 16);
    assert_eq!(s.regs.len(), 0);
    assert_eq!(s.warps, vec![Some(b(0, 5)), None]);
    assert_eq!(s.replicated_tid_mask(), 1 << 6);
    // A 2-D tile: the last dimension is fastest.
    let t = Layout::default_for(&[32, 64], 4, 4, 16);
    assert_eq!(t.regs, vec![b(1, 0), b(1, 1), b(0, 3), b(0, 4)]);
    assert_eq!(t.reg_flat(3), 3);
    assert_eq!(t.reg_flat(5), 1 + 64 * 8);
    // The vector width is capped by `max_vec` and by numel / threads.
    assert_eq!(Layout::default_for(&[1024], 4, 4, 1).contiguous_regs(), 1);
    assert_eq!(Layout::default_for(&[256], 4, 4, 16).contiguous_regs(), 2);
    assert_eq!(Layout::default_for(&[4096], 2, 4, 16).contiguous_regs(), 8);
}

#[test]
fn broadcast_relabeling_and_reduce_slicing() {
    let l = Layout::default_for(&[32, 64], 4, 4, 16);
    // Reducing axis 1 removes its bits: lanes that held columns replicate.
    let s = l.slice(1);
    assert_eq!(s.shape, vec![32]);
    assert_eq!(s.regs, vec![b(0, 3), b(0, 4)]);
    assert_eq!(s.lanes, vec![None, None, None, None, Some(b(0, 0))]);
    assert_eq!(s.warps, vec![Some(b(0, 1)), Some(b(0, 2))]);
    // expand_dims(1) of the slice, broadcast back to [32, 64], is the parent layout: the source
    // layout of the broadcast is the parent without dimension 1's bits.
    let e = s.insert_dim(1);
    assert_eq!(e, l.without_dims(&[1], &[32, 1]));
    assert_eq!(e.delete_dim(1), s);
    // The source register of each destination register drops the column register bits.
    assert_eq!(
        l.reg_map_dropping(&[1]),
        vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    );
    assert_eq!(
        l.reg_map_dropping(&[0]),
        vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    );
    // Reshape relabels through the flat index; trans swaps dimensions.
    let r = l.reshaped(&[2048]);
    assert_eq!(r.regs, vec![b(0, 0), b(0, 1), b(0, 9), b(0, 10)]);
    assert_eq!(r.reshaped(&[32, 64]), l);
    let t = l.transposed();
    assert_eq!(t.shape, vec![64, 32]);
    assert_eq!(t.regs[0], b(0, 0));
    assert_eq!(t.transposed(), l);
}

#[test]
fn scan_layouts() {
    for (shape, axis) in [
        (vec![32, 64], 0),
        (vec![32, 64], 1),
        (vec![2048], 0),
        (vec![4, 1024], 1),
        (vec![16, 16], 0),
    ] {
        for warps in [1, 4, 8] {
            let l = Layout::for_scan(&shape, axis, warps);
            assert!(l.is_scan_compatible(axis), "{l}");
            let all: HashSet<Vec<usize>> = coords(&l, warps as usize).into_iter().flatten().collect();
            assert_eq!(all.len(), shape.iter().product::<usize>());
        }
    }
    // The default 1-D layout keeps high bits in registers: not scannable as is.
    assert!(!Layout::default_for(&[1024], 4, 4, 16).is_scan_compatible(0));
    assert!(Layout::default_for(&[128], 4, 4, 16).is_scan_compatible(0));
}

fn p(name: &str, dtype: DType, div: u32) -> Param {
    Param {
        name: name.into(),
        dtype,
        divisibility: div,
    }
}

fn find(k: &Kernel, pred: impl Fn(&Op) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    walk_insts(&k.body, &mut |i| {
        if pred(&i.op) {
            out.extend(&i.results);
        }
    });
    out
}

#[test]
fn axis_analysis_of_offsets_pointers_and_masks() {
    for (div, vec) in [(16u32, 4usize), (1, 1), (2, 2)] {
        let k = trace(
            "a",
            vec![p("x", DType::Ptr(Elem::F32), 16), p("n", DType::Val(Elem::I32), div)],
            vec![],
            4,
            |a| {
                let offs = program_id(0) * 256 + arange(256);
                let mask = offs.compare(CmpOp::Lt, Tile::<i32>::from_value(a[1]));
                let x = Tile::<Ptr<f32>>::from_value(a[0]);
                let _ = load(x + offs, mask);
            },
        )
        .unwrap();
        let t = AxisTable::analyze(&k);
        let offs = find(&k, |o| matches!(o, Op::Binary(replay_dsl::ir::BinaryOp::Add, ..)))[0];
        let info = t.get(&k, offs);
        assert_eq!(info.contig, vec![256]);
        assert_eq!(info.div, vec![256]);
        let mask = find(&k, |o| matches!(o, Op::Cmp(..)))[0];
        assert_eq!(t.get(&k, mask).constancy, vec![div.min(256) as u64]);
        let ptr = find(&k, |o| matches!(o, Op::AddPtr(..)))[0];
        assert_eq!(t.get(&k, ptr).contig, vec![256]);
        assert_eq!(t.get(&k, ptr).div, vec![16]);
        assert_eq!(t.access_vec(&k, ptr, Some(mask)), vec);
        assert_eq!(t.access_vec(&k, ptr, None), 4);
    }
    // Row-major 2-D offsets with a stride divisible by 16; an odd offset breaks alignment.
    let k = trace(
        "b",
        vec![p("x", DType::Ptr(Elem::F16), 16), p("s", DType::Val(Elem::I32), 16)],
        vec![],
        4,
        |a| {
            let s = Tile::<i32>::from_value(a[1]);
            let offs = (arange(16) * s).expand_dims(1) + arange(64).expand_dims(0);
            let x = Tile::<Ptr<f16>>::from_value(a[0]);
            let _ = load(x + offs, true);
            let _ = load(x + (offs + 1), true);
            let _ = load(x + (arange(64) * 2), true);
        },
    )
    .unwrap();
    let t = AxisTable::analyze(&k);
    let ptrs = find(&k, |o| matches!(o, Op::AddPtr(..)));
    assert_eq!(t.get(&k, ptrs[0]).contig, vec![1, 64]);
    assert_eq!(t.access_vec(&k, ptrs[0], None), 8);
    assert_eq!(t.access_vec(&k, ptrs[1], None), 1);
    assert_eq!(t.get(&k, ptrs[2]).contig, vec![1]);
    assert_eq!(t.access_vec(&k, ptrs[2], None), 1);
    let arange_info = t.get(&k, find(&k, |o| matches!(o, Op::Arange))[0]);
    assert_eq!(arange_info.div, vec![MAX_DIV]);
}

#[test]
fn assignment_avoids_conversions_in_common_patterns() {
    // `sum(x * q[None, :], 1)` and `v[:, None] * k[None, :]`.
    let k = trace(
        "m",
        vec![
            p("x", DType::Ptr(Elem::F32), 16),
            p("q", DType::Ptr(Elem::F32), 16),
            p("o", DType::Ptr(Elem::F32), 16),
        ],
        vec![],
        4,
        |a| {
            let t = |i: usize| Tile::<Ptr<f32>>::from_value(a[i]);
            let (r, c) = (arange(16), arange(128));
            let offs = (r * 128).expand_dims(1) + c.expand_dims(0);
            let x = load(t(0) + offs, true);
            let q = load(t(1) + c, true);
            let v = load(t(1) + r, true);
            store(t(2) + r, sum(x * q.expand_dims(0), 1), true);
            store(t(2) + offs, v.expand_dims(1) * q.expand_dims(0), true);
        },
    )
    .unwrap();
    let axis = AxisTable::analyze(&k);
    let a = Assignment::new(&k, &axis);
    let loads = find(&k, |o| matches!(o, Op::Load { .. }));
    // The 8 KiB tile is a real load; the small vectors are issued in their users' layouts.
    assert_eq!(a.kind(loads[0]), Kind::Real);
    assert_eq!(a.kind(loads[1]), Kind::Remat);
    assert_eq!(a.kind(loads[2]), Kind::Remat);
    for l in &loads {
        assert_eq!(a.emitted(*l).len(), 1, "one layout for %{}:\n{}", l.0, a.describe());
    }
    // q is loaded in the parent's layout without dimension 0's bits.
    let x_layout = a.layout(a.natural(loads[0]).unwrap()).clone();
    let q_layout = a.layout(a.emitted(loads[1])[0]).clone();
    assert_eq!(q_layout, x_layout.without_dims(&[0], &[1, 128]).delete_dim(0));
    let red = find(&k, |o| matches!(o, Op::Reduce { .. }))[0];
    // The row reduction scatters its result over the lanes that held the columns.
    assert_eq!(a.layout(a.natural(red).unwrap()), &x_layout.scatter_slice(1));
}

#[test]
fn costly_elementwise_ops_are_computed_once() {
    // A softplus of a small vector, broadcast into a [16, 8, 8] product: computed once in its
    // own layout (and converted), not once per element of the product as a cheap op would be.
    let k = trace(
        "c",
        vec![p("x", DType::Ptr(Elem::F32), 16), p("o", DType::Ptr(Elem::F32), 16)],
        vec![],
        4,
        |a| {
            let t = |i: usize| Tile::<Ptr<f32>>::from_value(a[i]);
            let c = arange(8);
            let sp = softplus(load(t(0) + c, true));
            let ex = exp(load(t(0) + c, true));
            let big = zeros::<f32>([16, 8, 8]) + 1.0;
            let r = sum(
                big * sp.expand_dims(0).expand_dims(0) * ex.expand_dims(0).expand_dims(0),
                0,
            );
            store(t(1) + (arange(8) * 8).expand_dims(1) + c.expand_dims(0), r, true);
        },
    )
    .unwrap();
    let axis = AxisTable::analyze(&k);
    let a = Assignment::new(&k, &axis);
    let unary = |u: replay_dsl::ir::UnaryOp| find(&k, move |o| matches!(o, Op::Unary(x, _) if *x == u))[0];
    assert_eq!(
        a.kind(unary(replay_dsl::ir::UnaryOp::Softplus)),
        Kind::Real,
        "{}",
        a.describe()
    );
    assert_eq!(
        a.kind(unary(replay_dsl::ir::UnaryOp::Exp)),
        Kind::Remat,
        "{}",
        a.describe()
    );
}

/// The in-warp conversion plan reads, for every thread and target register, a source register
/// and lane of the same warp holding the same element.
#[test]
fn in_warp_conversion_plans_are_exact() {
    let warps = 4usize;
    let shape = [16usize, 8];
    let all: Vec<Bit> = (0..4).map(|i| b(0, i)).chain((0..3).map(|i| b(1, i))).collect();
    // Layouts from rotations of the coordinate bits over (regs, lanes, warps), with replication.
    let mut layouts = Vec::new();
    for rot in 0..all.len() {
        for nreg in 0..3 {
            for repl in [None, Some(0usize), Some(3)] {
                let bits: Vec<Bit> = (0..all.len()).map(|i| all[(i + rot) % all.len()]).collect();
                let mut it = bits.into_iter();
                let regs: Vec<Bit> = it.by_ref().take(nreg).collect();
                let mut lanes = vec![None; LANE_BITS];
                for (j, slot) in lanes.iter_mut().enumerate() {
                    if Some(j) != repl {
                        *slot = it.next();
                    }
                }
                let mut ws = vec![None; 2];
                for slot in ws.iter_mut() {
                    *slot = it.next();
                }
                let mut regs = regs;
                regs.extend(it);
                layouts.push(Layout {
                    shape: shape.to_vec(),
                    regs,
                    lanes,
                    warps: ws,
                });
            }
        }
    }
    let elem = |l: &Layout, t: usize, r: usize| -> Vec<usize> {
        let mut c: Vec<usize> = (0..2).map(|d| l.reg_coord(r, d)).collect();
        for (hw, bit) in l.thread_bits() {
            if t >> hw & 1 == 1 {
                c[bit.dim as usize] |= 1 << bit.bit;
            }
        }
        c
    };
    let mut planned = 0;
    for from in &layouts {
        for to in &layouts {
            let Some(plan) = in_warp_plan(from, to) else { continue };
            planned += 1;
            for t in 0..32 * warps {
                let dynamic = plan
                    .dynamic
                    .iter()
                    .fold(0usize, |acc, (tb, lb)| acc | ((t >> tb & 1) << lb));
                for (r, (rho, lane)) in plan.regs.iter().enumerate() {
                    let src = (t & !31) | dynamic | *lane as usize;
                    assert_eq!(
                        elem(from, src, *rho),
                        elem(to, t, r),
                        "{from} -> {to}, thread {t}, reg {r}"
                    );
                    if plan.local {
                        // Replicated lanes hold the same elements: the thread's own copy.
                        assert_eq!(elem(from, t, *rho), elem(to, t, r));
                    }
                }
            }
        }
    }
    assert!(planned > layouts.len(), "only {planned} plans");
}
