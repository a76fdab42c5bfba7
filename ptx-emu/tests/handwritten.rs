//! Hand-written PTX for the tricky pieces: `mma.sync` fragment layouts against a CPU matmul,
//! `ldmatrix` (plain and `.trans`), the `shfl.sync` modes, the memcheck, parse errors,
//! diverged collectives and `cp.async` groups.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use replay_ptx_emu::{EmuError, Global, Module, Param};

/// A module with one entry `k(.param .u64 p0, .param .u64 p1)` around `body`; `%rd1`/`%rd2`
/// hold the two pointers, `%r0` the lane (= `%tid.x`).
fn module(body: &str, shared: u32) -> String {
    format!(
        ".version 8.0\n.target sm_90a\n.address_size 64\n.shared .align 16 .b8 smem[{shared}];\n\
         .visible .entry k(\n\t.param .u64 p0,\n\t.param .u64 p1\n)\n.maxntid 32, 1, 1\n{{\n\
         \t.reg .pred %p<8>;\n\t.reg .b16 %h<8>;\n\t.reg .b32 %r<64>;\n\t.reg .f32 %f<16>;\n\t.reg .b64 %rd<16>;\n\
         \tld.param.u64 %rd1, [p0];\n\tld.param.u64 %rd2, [p1];\n\tmov.u32 %r0, %tid.x;\n{body}\n\tret;\n}}\n"
    )
}

fn run(body: &str, shared: u32, input: Vec<u8>, out_bytes: usize) -> Result<Vec<u8>, EmuError> {
    let m = Module::parse(&module(body, shared))?;
    let mut g = Global::new();
    let a = g.alloc(input);
    let b = g.alloc(vec![0xFF; out_bytes]);
    m.launch("k", [1, 1, 1], [32, 1, 1], &[Param::Ptr(a), Param::Ptr(b)], &mut g)?;
    Ok(g.take(b))
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn bytes_of(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Loads `n` words per lane from `p0` (lane-major: lane `l`'s word `i` at `4(l·n + i)`) into
/// `%r{first}..`, and stores `%f1..%f4` per lane to `p1`.
fn lane_words(n: usize, first: usize) -> String {
    let mut s = format!(
        "\tmul.lo.u32 %r1, %r0, {};\n\tmul.wide.u32 %rd3, %r1, 4;\n\tadd.s64 %rd4, %rd1, %rd3;\n",
        n
    );
    for i in 0..n {
        s += &format!("\tld.global.b32 %r{}, [%rd4+{}];\n", first + i, 4 * i);
    }
    s
}

fn store_d() -> String {
    "\tmul.wide.u32 %rd5, %r0, 16;\n\tadd.s64 %rd6, %rd2, %rd5;\n\
     \tst.global.v4.f32 [%rd6], {%f1, %f2, %f3, %f4};\n"
        .to_string()
}

/// One `mma` of random A (16×k), B (k×8), C (16×8), fragments laid out on the host as the
/// PTX ISA says, against a CPU matmul in f64.
fn check_mma(kind: &str, k: usize, rng: &mut SmallRng) {
    let round = |x: f32| -> (u32, f64) {
        match kind {
            "tf32" => {
                let b = x.to_bits() & 0xFFFF_E000;
                (b | (rng_bits(x) & 0x1FFF), f32::from_bits(b) as f64)
            }
            "bf16" => {
                let h = half::bf16::from_f32(x);
                (h.to_bits() as u32, h.to_f64())
            }
            _ => {
                let h = half::f16::from_f32(x);
                (h.to_bits() as u32, h.to_f64())
            }
        }
    };
    let mut a = vec![vec![(0u32, 0f64); k]; 16];
    let mut b = vec![vec![(0u32, 0f64); 8]; k];
    for row in a.iter_mut() {
        for e in row.iter_mut() {
            *e = round(rng.gen_range(-2.0f32..2.0));
        }
    }
    for row in b.iter_mut() {
        for e in row.iter_mut() {
            *e = round(rng.gen_range(-2.0f32..2.0));
        }
    }
    let c: Vec<Vec<f32>> = (0..16)
        .map(|_| (0..8).map(|_| rng.gen_range(-2.0f32..2.0)).collect())
        .collect();
    // Fragments per lane: 4 A words, 2 B words, 4 C words.
    let mut words = vec![];
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        if kind == "tf32" {
            for (r, cc) in [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)] {
                words.push(a[r][cc].0);
            }
            for (r, cc) in [(t, g), (t + 4, g)] {
                words.push(b[r][cc].0);
            }
        } else {
            for r in 0..4 {
                let (row, col) = (g + 8 * (r % 2), 2 * t + 8 * (r / 2));
                words.push(a[row][col].0 | a[row][col + 1].0 << 16);
            }
            for r in 0..2 {
                let (row, col) = (2 * t + 8 * r, g);
                words.push(b[row][col].0 | b[row + 1][col].0 << 16);
            }
        }
        for i in 0..4 {
            words.push(c[g + 8 * (i / 2)][2 * t + i % 2].to_bits());
        }
    }
    let shape = if kind == "tf32" { "m16n8k8" } else { "m16n8k16" };
    let body = format!(
        "{}\tmov.b32 %f5, %r16;\n\tmov.b32 %f6, %r17;\n\tmov.b32 %f7, %r18;\n\tmov.b32 %f8, %r19;\n\
         \tmma.sync.aligned.{shape}.row.col.f32.{kind}.{kind}.f32 {{%f1, %f2, %f3, %f4}}, {{%r10, %r11, %r12, %r13}}, {{%r14, %r15}}, {{%f5, %f6, %f7, %f8}};\n{}",
        lane_words(10, 10),
        store_d()
    );
    let out = u32s(&run(&body, 16, bytes_of(&words), 32 * 16).unwrap());
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for i in 0..4 {
            let (row, col) = (g + 8 * (i / 2), 2 * t + i % 2);
            let want = (0..k).map(|l| a[row][l].1 * b[l][col].1).sum::<f64>() + c[row][col] as f64;
            let got = f32::from_bits(out[lane * 4 + i]) as f64;
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{kind} D[{row}][{col}] (lane {lane}, d{i}): {got} vs {want}"
            );
        }
    }
}

/// Some low bits to put under a tf32 value: the emulator must ignore them.
fn rng_bits(x: f32) -> u32 {
    x.to_bits().rotate_left(7)
}

#[test]
fn mma_fragments_match_a_cpu_matmul() {
    let mut rng = SmallRng::seed_from_u64(7);
    for _ in 0..20 {
        check_mma("tf32", 8, &mut rng);
        check_mma("bf16", 16, &mut rng);
        check_mma("f16", 16, &mut rng);
    }
}

/// The tensor cores round a sum toward zero: `1 − 2⁻³⁰` (C = 1, eight products of −2⁻³³)
/// becomes the f32 below 1, not 1; `−1 + 2⁻³⁰` the f32 above −1; `1 + 2⁻³⁰` stays 1.
#[test]
fn mma_sums_round_toward_zero() {
    // (C, B's elements) → D's bits, with A's elements 2⁻²⁰.
    for (c, b, want) in [
        (0x3F80_0000u32, 0xB900_0000u32, 0x3F7F_FFFFu32),
        (0xBF80_0000, 0x3900_0000, 0xBF7F_FFFF),
        (0x3F80_0000, 0x3900_0000, 0x3F80_0000),
    ] {
        let body = format!(
            "\tmov.b32 %r10, 0x35800000;\n\tmov.b32 %r11, 0x35800000;\n\tmov.b32 %r12, 0x35800000;\n\
             \tmov.b32 %r13, 0x35800000;\n\tmov.b32 %r14, {b};\n\tmov.b32 %r15, {b};\n\
             \tmov.b32 %f5, {c};\n\tmov.b32 %f6, {c};\n\tmov.b32 %f7, {c};\n\tmov.b32 %f8, {c};\n\
             \tmma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%f1, %f2, %f3, %f4}}, {{%r10, %r11, %r12, %r13}}, {{%r14, %r15}}, {{%f5, %f6, %f7, %f8}};\n{}",
            store_d()
        );
        let out = u32s(&run(&body, 16, vec![0; 4], 32 * 16).unwrap());
        assert!(
            out.iter().all(|&d| d == want),
            "C {c:#x}, B {b:#x}: {:#x} for {want:#x}",
            out[0]
        );
    }
}

#[test]
fn ldmatrix_plain_and_transposed() {
    // Shared memory: 4 matrices of 8×8 b16, element (m, r, c) = 256m + 16r + c, rows 16
    // bytes apart, matrix m at 128m. Lane 8m + r addresses row r of matrix m.
    let fill: String = (0..256)
        .map(|i| {
            format!(
                "\tmov.b16 %h1, {};\n\tst.shared.b16 [smem+{}], %h1;\n",
                (i / 64) * 256 + ((i / 8) % 8) * 16 + i % 8,
                2 * i
            )
        })
        .collect();
    for trans in [false, true] {
        let t = if trans { ".trans" } else { "" };
        let body = format!(
            "\tsetp.eq.u32 %p1, %r0, 0;\n\t@!%p1 bra $L_skip;\n{fill}$L_skip:\n\tbar.sync 0;\n\
             \tmov.u32 %r2, smem;\n\tmad.lo.s32 %r3, %r0, 16, %r2;\n\
             \tldmatrix.sync.aligned.m8n8.x4{t}.shared.b16 {{%r4, %r5, %r6, %r7}}, [%r3];\n\
             \tmul.wide.u32 %rd5, %r0, 16;\n\tadd.s64 %rd6, %rd2, %rd5;\n\
             \tst.global.v4.b32 [%rd6], {{%r4, %r5, %r6, %r7}};\n"
        );
        let out = u32s(&run(&body, 512, vec![], 32 * 16).unwrap());
        for lane in 0..32u32 {
            for m in 0..4u32 {
                let (q, p) = (lane / 4, 2 * (lane % 4));
                let e = |r: u32, c: u32| 256 * m + 16 * r + c;
                let (lo, hi) = if trans {
                    (e(p, q), e(p + 1, q))
                } else {
                    (e(q, p), e(q, p + 1))
                };
                assert_eq!(
                    out[(lane * 4 + m) as usize],
                    lo | hi << 16,
                    "trans {trans} lane {lane} matrix {m}"
                );
            }
        }
    }
}

/// `shfl.sync.{mode}.b32` of `lane · 10` with `b`, `c`: each lane's value and predicate.
fn shfl(mode: &str, b: u32, c: u32) -> Vec<(u32, bool)> {
    let body = format!(
        "\tmul.lo.u32 %r1, %r0, 10;\n\tshfl.sync.{mode}.b32 %r2|%p1, %r1, {b}, {c}, 0xffffffff;\n\
         \tselp.u32 %r3, 1, 0, %p1;\n\tmul.wide.u32 %rd5, %r0, 8;\n\tadd.s64 %rd6, %rd2, %rd5;\n\
         \tst.global.v2.b32 [%rd6], {{%r2, %r3}};\n"
    );
    let out = u32s(&run(&body, 16, vec![], 32 * 8).unwrap());
    out.chunks(2).map(|w| (w[0], w[1] == 1)).collect()
}

#[test]
fn shfl_modes() {
    let want = |f: &dyn Fn(u32) -> Option<u32>| -> Vec<(u32, bool)> {
        (0..32)
            .map(|l| f(l).map_or((l * 10, false), |j| (j * 10, true)))
            .collect()
    };
    assert_eq!(shfl("bfly", 1, 31), want(&|l| Some(l ^ 1)));
    assert_eq!(shfl("bfly", 16, 31), want(&|l| Some(l ^ 16)));
    assert_eq!(shfl("up", 8, 0), want(&|l| l.checked_sub(8)));
    assert_eq!(shfl("down", 4, 31), want(&|l| Some(l + 4).filter(|&j| j < 32)));
    assert_eq!(shfl("idx", 5, 31), want(&|_| Some(5)));
    // Segments of 8 lanes: c = ((32 − 8) << 8) | clamp.
    assert_eq!(shfl("idx", 3, (24 << 8) | 7), want(&|l| Some(l / 8 * 8 + 3)));
    assert_eq!(shfl("up", 2, 24 << 8), want(&|l| (l % 8 >= 2).then(|| l - 2)));
    assert_eq!(shfl("down", 1, (24 << 8) | 7), want(&|l| (l % 8 < 7).then_some(l + 1)));
}

#[test]
fn out_of_bounds_global_store_names_the_instruction() {
    // Lane 31 stores at byte 124 of a 124-byte buffer.
    let body = "\tmul.wide.u32 %rd5, %r0, 4;\n\tadd.s64 %rd6, %rd2, %rd5;\n\tst.global.b32 [%rd6], %r0;\n";
    match run(body, 16, vec![], 124) {
        Err(EmuError::Memory {
            line,
            inst,
            space,
            addr,
            thread,
            ..
        }) => {
            assert_eq!(space, "global");
            assert_eq!(inst, "st.global.b32 [%rd6], %r0");
            assert_eq!(thread, [31, 0, 0]);
            assert_eq!(addr, (2 << 40) + 124);
            assert!(module(body, 16)
                .lines()
                .nth(line - 1)
                .unwrap()
                .contains("st.global.b32"));
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
}

#[test]
fn prefetch_needs_an_address_inside_a_buffer() {
    let inside = "\tprefetch.global.L2 [%rd1+4];\n";
    run(inside, 16, vec![0; 8], 4).unwrap();
    let wild = "\tprefetch.global.L2 [%rd1+-4];\n";
    let e = run(wild, 16, vec![0; 8], 4).unwrap_err().to_string();
    assert!(
        e.contains("not inside any buffer") || e.contains("out of bounds"),
        "{e}"
    );
}

#[test]
fn shared_bounds_and_alignment() {
    let oob = "\tmov.u32 %r2, smem;\n\tst.shared.b32 [%r2+16], %r0;\n";
    let e = run(oob, 16, vec![], 4).unwrap_err().to_string();
    assert!(
        e.contains("shared") && e.contains("outside the block's 16 bytes"),
        "{e}"
    );
    let misaligned = "\tld.global.b32 %r2, [%rd1+2];\n";
    let e = run(misaligned, 16, vec![0; 8], 4).unwrap_err().to_string();
    assert!(e.contains("misaligned"), "{e}");
    let wild = "\tld.global.b32 %r2, [%rd1+-4];\n";
    let e = run(wild, 16, vec![0; 8], 4).unwrap_err().to_string();
    assert!(
        e.contains("not inside any buffer") || e.contains("out of bounds"),
        "{e}"
    );
}

#[test]
fn unknown_instructions_and_modifiers_are_parse_errors() {
    let src = module("\ttex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];\n", 16);
    match Module::parse(&src) {
        Err(EmuError::UnknownOpcode { line, opcode }) => {
            assert_eq!(opcode, "tex.2d.v4.f32.f32");
            assert!(src.lines().nth(line - 1).unwrap().contains("tex.2d"));
        }
        other => panic!("expected an unknown-opcode error, got {other:?}"),
    }
    let e = Module::parse(&module("\tadd.rz.f32 %f1, %f2, %f3;\n", 16)).unwrap_err();
    assert!(e.to_string().contains("unsupported modifier `.rz`"), "{e}");
    let e = Module::parse(&module("\tadd.s32 %r1, %q1, 1;\n", 16)).unwrap_err();
    assert!(e.to_string().contains("undeclared register `%q1`"), "{e}");
}

#[test]
fn a_diverged_collective_is_an_error() {
    let body = "\tsetp.lt.u32 %p1, %r0, 16;\n\t@%p1 bra $L_end;\n\
                \tshfl.sync.bfly.b32 %r2, %r0, 1, 31, 0xffffffff;\n$L_end:\n";
    let e = run(body, 16, vec![], 4).unwrap_err();
    assert!(matches!(e, EmuError::Sync { .. }), "{e}");
    assert!(e.to_string().contains("has exited"), "{e}");
}

#[test]
fn divergent_branches_and_barriers() {
    // Odd lanes take a loop of `lane` iterations, even lanes skip it; all meet at bar.sync.
    let body = "\tmov.u32 %r1, 0;\n\tand.b32 %r2, %r0, 1;\n\tsetp.eq.u32 %p1, %r2, 0;\n\t@%p1 bra $L_join;\n\
                $L_loop:\n\tadd.u32 %r1, %r1, 1;\n\tsetp.lt.u32 %p2, %r1, %r0;\n\t@%p2 bra $L_loop;\n\
                $L_join:\n\tbar.sync 0;\n\tmul.wide.u32 %rd5, %r0, 4;\n\tadd.s64 %rd6, %rd2, %rd5;\n\
                \tst.global.b32 [%rd6], %r1;\n";
    let out = u32s(&run(body, 16, vec![], 128).unwrap());
    let want: Vec<u32> = (0..32).map(|l| if l % 2 == 1 { l } else { 0 }).collect();
    assert_eq!(out, want);
}

#[test]
fn per_line_counts_follow_the_control_flow() {
    // Lane l runs the loop body l + 1 times; lanes ≥ 16 skip the guarded add.
    let body = "\tmov.u32 %r1, 0;\n\
                $L_top:\n\
                \tadd.u32 %r1, %r1, 1;\n\
                \tsetp.le.u32 %p1, %r1, %r0;\n\
                \t@%p1 bra $L_top;\n\
                \tsetp.lt.u32 %p2, %r0, 16;\n\
                \t@%p2 add.u32 %r1, %r1, 7;\n";
    let src = module(body, 16);
    let m = Module::parse(&src).unwrap();
    let mut g = Global::new();
    let (a, b) = (g.alloc(vec![0; 4]), g.alloc(vec![0; 4]));
    let stats = m
        .launch("k", [2, 1, 1], [32, 1, 1], &[Param::Ptr(a), Param::Ptr(b)], &mut g)
        .unwrap();
    let line_of = |text: &str| src.lines().position(|l| l.contains(text)).unwrap() + 1;
    let count = |text: &str| {
        let line = line_of(text);
        stats
            .per_line
            .iter()
            .find(|(l, _)| *l == line)
            .map(|(_, n)| *n)
            .unwrap()
    };
    let body_runs: u64 = 2 * (1..=32).sum::<u64>(); // two blocks
    assert_eq!(count("add.u32 %r1, %r1, 1;"), body_runs);
    assert_eq!(count("@%p1 bra"), body_runs);
    assert_eq!(count("mov.u32 %r1, 0;"), 64);
    // A guarded-off instruction still issues.
    assert_eq!(count("@%p2 add.u32"), 64);
    assert_eq!(
        stats.thread_instructions,
        stats.per_line.iter().map(|(_, n)| n).sum::<u64>()
    );
}

/// Lane `l` works on 16 bytes: `%r3` = `smem + 16l`, `%rd4` = `p0 + 16l` (the input), `%rd6`
/// = `p1 + 16l`; after `body` it stores `%r4..%r7` there. Returns the 32 × 4 output words.
fn cp_async(body: &str, input: &[u32]) -> Result<Vec<u32>, EmuError> {
    let body = format!(
        "\tmov.u32 %r2, smem;\n\tmad.lo.s32 %r3, %r0, 16, %r2;\n\tmul.wide.u32 %rd3, %r0, 16;\n\
         \tadd.s64 %rd4, %rd1, %rd3;\n\tadd.s64 %rd6, %rd2, %rd3;\n{body}\
         \tst.global.v4.b32 [%rd6], {{%r4, %r5, %r6, %r7}};\n"
    );
    run(&body, 1024, bytes_of(input), 32 * 16).map(|b| u32s(&b))
}

/// Distinct input words.
fn words(n: u32) -> Vec<u32> {
    (0..n).map(|i| 0xA000_0000 | i).collect()
}

const LD_OWN: &str = "\tld.shared.v4.b32 {%r4, %r5, %r6, %r7}, [%r3];\n";

#[test]
fn cp_async_copies_once_its_group_is_waited_for() {
    let input = words(128);
    for copy in [
        "\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n",
        "\tcp.async.ca.shared.global [%r3+0], [%rd4+0], 16, 16;\n",
    ] {
        let body = format!("{copy}\tcp.async.commit_group;\n\tcp.async.wait_group 0;\n{LD_OWN}");
        assert_eq!(cp_async(&body, &input).unwrap(), input, "{copy}");
    }
}

#[test]
fn cp_async_src_size_zero_fills_the_rest() {
    let input = words(128);
    // Half of a 16-byte copy, src-size as an immediate and as a register.
    for src in ["8", "%r8"] {
        let body = format!(
            "\tmov.u32 %r8, 8;\n\tcp.async.cg.shared.global [%r3], [%rd4], 16, {src};\n\
             \tcp.async.commit_group;\n\tcp.async.wait_group 0;\n{LD_OWN}"
        );
        let out = cp_async(&body, &input).unwrap();
        for l in 0..32 {
            assert_eq!(
                out[4 * l..4 * l + 4],
                [input[4 * l], input[4 * l + 1], 0, 0],
                "{src} lane {l}"
            );
        }
    }
    // src-size 0: the (wild, misaligned) global address is never read; all zeros land.
    let body = format!(
        "\tmov.u32 %r8, 0;\n\tmov.u64 %rd7, 12345;\n\tcp.async.cg.shared.global [%r3], [%rd7+-7], 16, %r8;\n\
         \tcp.async.wait_all;\n{LD_OWN}"
    );
    assert_eq!(cp_async(&body, &input).unwrap(), vec![0; 128]);
}

#[test]
fn cp_async_ca_copies_4_and_8_bytes() {
    // Word 1 is left alone (shared starts as 0xFF bytes).
    let input = words(128);
    let body = format!(
        "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.ca.shared.global [%r3+8], [%rd4+8], 8;\n\
         \tcp.async.commit_group;\n\tcp.async.wait_group 0;\n{LD_OWN}"
    );
    let out = cp_async(&body, &input).unwrap();
    for l in 0..32 {
        let i = &input[4 * l..];
        assert_eq!(out[4 * l..4 * l + 4], [i[0], u32::MAX, i[2], i[3]], "lane {l}");
    }
    let e = Module::parse(&module("\tcp.async.cg.shared.global [%r3], [%rd4], 8;\n", 16)).unwrap_err();
    assert!(e.to_string().contains("bad cp-size `8` for .cg"), "{e}");
}

/// The error of a run that must fail on a shared read of bytes a `cp.async` still writes.
fn in_flight_error(body: &str) -> EmuError {
    let e = cp_async(body, &words(256)).unwrap_err();
    assert!(
        e.to_string()
            .contains("shared memory read of bytes with a cp.async still in flight"),
        "{e}"
    );
    e
}

#[test]
fn reading_shared_bytes_before_their_cp_async_completes_is_an_error() {
    let copy = "\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n";
    // Committed but not waited for.
    let e = in_flight_error(&format!("{copy}\tcp.async.commit_group;\n{LD_OWN}"));
    match e {
        EmuError::Memory { inst, space, .. } => {
            assert_eq!(inst, "ld.shared.v4.b32 {%r4, %r5, %r6, %r7}, [%r3]");
            assert_eq!(space, "shared");
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
    // Not committed: wait_group does not complete it, wait_all does.
    in_flight_error(&format!("{copy}\tcp.async.wait_group 0;\n{LD_OWN}"));
    cp_async(&format!("{copy}\tcp.async.wait_all;\n{LD_OWN}"), &words(256)).unwrap();
    // Another thread's copy, across a barrier (which completes nothing).
    let neighbour = "\txor.b32 %r9, %r0, 1;\n\tmad.lo.s32 %r10, %r9, 16, %r2;\n\
                     \tld.shared.v4.b32 {%r4, %r5, %r6, %r7}, [%r10];\n";
    in_flight_error(&format!("{copy}\tcp.async.commit_group;\n\tbar.sync 0;\n{neighbour}"));
    let out = cp_async(
        &format!("{copy}\tcp.async.commit_group;\n\tcp.async.wait_group 0;\n\tbar.sync 0;\n{neighbour}"),
        &words(256),
    )
    .unwrap();
    assert_eq!(out[..4], words(8)[4..]);
    // ldmatrix reads shared memory too.
    let ldm = "\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r4, %r5, %r6, %r7}, [%r3];\n";
    let e = in_flight_error(&format!("{copy}\tcp.async.commit_group;\n{ldm}"));
    assert!(e.to_string().contains("ldmatrix"), "{e}");
    cp_async(
        &format!("{copy}\tcp.async.wait_all;\n\tbar.sync 0;\n{ldm}"),
        &words(256),
    )
    .unwrap();
}

#[test]
fn wait_group_completes_all_but_the_newest_groups() {
    // Group 1 to `smem + 16l`, group 2 to `smem + 512 + 16l` from input word 128 on.
    let input = words(256);
    let two = "\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n\tcp.async.commit_group;\n\
               \tcp.async.cg.shared.global [%r3+512], [%rd4+512], 16;\n\tcp.async.commit_group;\n\
               \tcp.async.wait_group 1;\n";
    assert_eq!(cp_async(&format!("{two}{LD_OWN}"), &input).unwrap(), input[..128]);
    let newer = "\tld.shared.v4.b32 {%r4, %r5, %r6, %r7}, [%r3+512];\n";
    let e = in_flight_error(&format!("{two}{LD_OWN}{newer}"));
    assert!(e.to_string().contains("[%r3+512]"), "{e}");
    let all = format!("{two}\tcp.async.wait_group 0;\n{newer}");
    assert_eq!(cp_async(&all, &input).unwrap(), input[128..]);
}

#[test]
fn cp_async_reads_global_memory_when_its_group_completes() {
    let body = format!(
        "\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n\tcp.async.commit_group;\n\
         \tst.global.b32 [%rd4+4], %r0;\n\tcp.async.wait_group 0;\n{LD_OWN}"
    );
    let (input, out) = (words(128), cp_async(&body, &words(128)).unwrap());
    for l in 0..32 {
        let i = &input[4 * l..];
        assert_eq!(out[4 * l..4 * l + 4], [i[0], l as u32, i[2], i[3]], "lane {l}");
    }
}

#[test]
fn cp_async_bounds() {
    // 31.5 lanes' worth of input: lane 31's full copy is out of bounds, its first 8 bytes are not.
    let input = words(31 * 4 + 2);
    match cp_async("\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n", &input) {
        Err(EmuError::Memory {
            inst, space, thread, ..
        }) => {
            assert_eq!(inst, "cp.async.cg.shared.global [%r3], [%rd4], 16");
            assert_eq!(space, "global");
            assert_eq!(thread, [31, 0, 0]);
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
    let half = format!("\tcp.async.cg.shared.global [%r3], [%rd4], 16, 8;\n\tcp.async.wait_all;\n{LD_OWN}");
    assert_eq!(cp_async(&half, &input).unwrap()[124..], [input[124], input[125], 0, 0]);
    let e = cp_async("\tcp.async.cg.shared.global [%r3+8], [%rd4], 16;\n", &words(128)).unwrap_err();
    assert!(
        e.to_string().contains("shared") && e.to_string().contains("misaligned"),
        "{e}"
    );
    let e = cp_async("\tcp.async.cg.shared.global [%r3+1024], [%rd4], 16;\n", &words(128)).unwrap_err();
    assert!(e.to_string().contains("outside the block's 1024 bytes"), "{e}");
    let e = cp_async("\tcp.async.ca.shared.global [%r3], [%rd4], 8, 9;\n", &words(128)).unwrap_err();
    assert!(e.to_string().contains("src-size 9 exceeds the cp-size 8"), "{e}");
}
