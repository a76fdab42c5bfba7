//! PTX text to a decoded program: directives, register declarations, labels and
//! instructions, one statement per line (the shape the replay backend emits). Anything not
//! understood is an error naming the line; nothing is skipped silently.

use crate::error::EmuError;
use crate::inst::*;
use std::collections::HashMap;

/// A kernel parameter as declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    /// Its name in the PTX.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u32,
}

/// One decoded `.entry`.
#[derive(Clone, Debug)]
pub struct Function {
    /// The entry name.
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<ParamDecl>,
    /// `.maxntid` / `.reqntid`, when declared.
    pub maxntid: Option<[u32; 3]>,
    /// Register slots a thread needs.
    pub nregs: u32,
    /// The instructions.
    pub insts: Vec<Inst>,
    /// The 1-based PTX line of each instruction.
    pub lines: Vec<usize>,
    /// The text of each instruction (for error messages).
    pub texts: Vec<String>,
    /// Bytes of shared memory a block has (module-level and entry-level declarations).
    pub shared_bytes: u32,
}

/// A parsed module: its entries.
#[derive(Clone, Debug)]
pub struct Program {
    /// The `.entry` functions.
    pub functions: Vec<Function>,
}

/// A register range `%name<count>` (or a single `%name`).
#[derive(Clone, Copy)]
struct RegRange {
    base: u32,
    count: u32,
}

#[derive(Default)]
struct Shared {
    symbols: HashMap<String, u32>,
    bytes: u32,
}

impl Shared {
    fn declare(&mut self, line: usize, text: &str) -> Result<(), EmuError> {
        // `.shared .align A .b8 name[N]`, or `.extern .shared .align A .b8 name[]`
        let err = |m: &str| perr(line, format!("{m}: `{text}`"));
        let (dynamic, decl_text) = match text.strip_prefix(".extern") {
            Some(rest) => (true, rest.trim_start()),
            None => (false, text),
        };
        let toks: Vec<&str> = decl_text.split_whitespace().collect();
        let mut align = 1u32;
        let mut i = 1;
        if toks.get(i) == Some(&".align") {
            align = toks
                .get(i + 1)
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| err("bad .align"))?;
            i += 2;
        }
        let elem = match toks.get(i).copied() {
            Some(".b8" | ".u8" | ".s8") => 1,
            Some(".b16" | ".u16" | ".s16") => 2,
            Some(".b32" | ".u32" | ".s32" | ".f32") => 4,
            Some(".b64" | ".u64" | ".s64" | ".f64") => 8,
            _ => return Err(err("unsupported .shared element type")),
        };
        let decl = toks.get(i + 1).ok_or_else(|| err("missing name"))?;
        // `name[]` (after `.extern`): the dynamic array, sized at launch, after the others.
        let (name, count) = match decl.split_once('[') {
            Some((n, "]")) if dynamic => (n, 0),
            Some((n, rest)) => {
                let c: u32 = rest
                    .strip_suffix(']')
                    .and_then(|c| c.parse().ok())
                    .ok_or_else(|| err("bad array size"))?;
                (n, c)
            }
            None => (*decl, 1),
        };
        if toks.len() != i + 2 {
            return Err(err("unsupported .shared declaration (initialisers, extern?)"));
        }
        let align = align.max(elem);
        let off = self.bytes.div_ceil(align) * align;
        self.symbols.insert(name.to_string(), off);
        self.bytes = off + elem * count;
        Ok(())
    }
}

fn perr(line: usize, message: String) -> EmuError {
    EmuError::Parse { line, message }
}

/// The one external function calls may name: the device runtime's graph-condition setter.
const SET_CONDITION: &str = "cudaGraphSetConditional";

/// Parses a whole module.
pub fn parse(text: &str) -> Result<Program, EmuError> {
    let mut functions = vec![];
    let mut shared = Shared::default();
    let mut declares_set_condition = false;
    let lines: Vec<(usize, String)> = strip_comments(text)
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let mut i = 0;
    while i < lines.len() {
        let (ln, l) = (&lines[i].0, lines[i].1.as_str());
        let l = l.strip_suffix(';').unwrap_or(l).trim();
        if [".version", ".target", ".address_size", ".file"]
            .iter()
            .any(|d| l.starts_with(d))
        {
            // `.file`: source files of `.loc` lines (debug information, no semantics).
            i += 1;
        } else if l.starts_with(".shared") || l.starts_with(".extern .shared") {
            shared.declare(*ln, l)?;
            i += 1;
        } else if let Some(decl) = l.strip_prefix(".extern .func") {
            // The device runtime's functions ptxas resolves itself: only graph conditions.
            if !decl.trim_start().starts_with(SET_CONDITION) {
                return Err(perr(*ln, format!("unsupported external function `{l}`")));
            }
            declares_set_condition = true;
            i += 1;
        } else if l.starts_with(".visible .entry") || l.starts_with(".entry") {
            let (f, next) = parse_entry(&lines, i, &shared, declares_set_condition)?;
            functions.push(f);
            i = next;
        } else {
            return Err(perr(*ln, format!("unsupported module-level statement `{l}`")));
        }
    }
    Ok(Program { functions })
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(a), b) if b.is_none_or(|b| a < b) => {
                out.push_str(&rest[..a]);
                rest = &rest[a..];
                rest = match rest.find('\n') {
                    Some(n) => &rest[n..],
                    None => "",
                };
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                let end = rest[b..].find("*/").map_or(rest.len(), |e| b + e + 2);
                // Keep the line count: a block comment's newlines stay.
                out.extend(rest[b..end].chars().filter(|&c| c == '\n'));
                rest = &rest[end..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Parses `.entry NAME( … ) … { … }` starting at `lines[start]`; returns it and the index of
/// the line after its closing brace.
fn parse_entry(
    lines: &[(usize, String)],
    start: usize,
    module_shared: &Shared,
    declares_set_condition: bool,
) -> Result<(Function, usize), EmuError> {
    let (ln, head) = (lines[start].0, lines[start].1.as_str());
    let after = head.split(".entry").nth(1).unwrap_or("").trim();
    let (name, rest) = after
        .split_once('(')
        .ok_or_else(|| perr(ln, format!("expected `(` after the entry name: `{head}`")))?;
    let name = name.trim().to_string();
    let mut params = vec![];
    let mut i = start + 1;
    let mut closed = rest.trim_start().starts_with(')');
    while !closed {
        let (pl, p) = lines
            .get(i)
            .ok_or_else(|| perr(ln, "unterminated parameter list".into()))?;
        i += 1;
        if p.starts_with(')') {
            closed = true;
            continue;
        }
        let p = p.trim_end_matches(',');
        let toks: Vec<&str> = p.split_whitespace().collect();
        let bytes = match (toks.first(), toks.get(1)) {
            (Some(&".param"), Some(t)) => type_bytes(t.trim_start_matches('.')),
            _ => None,
        }
        .ok_or_else(|| perr(*pl, format!("unsupported parameter `{p}`")))?;
        if toks.len() != 3 {
            return Err(perr(*pl, format!("unsupported parameter `{p}`")));
        }
        params.push(ParamDecl {
            name: toks[2].to_string(),
            bytes,
        });
    }
    let mut maxntid = None;
    loop {
        let (hl, h) = lines.get(i).ok_or_else(|| perr(ln, "missing entry body".into()))?;
        i += 1;
        let h = h.trim_end_matches(';');
        if h == "{" {
            break;
        }
        let mut toks = h.splitn(2, char::is_whitespace);
        match toks.next() {
            Some(".maxntid" | ".reqntid") => {
                let dims: Vec<u32> = toks
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|d| d.trim().parse())
                    .collect::<Result<_, _>>()
                    .map_err(|_| perr(*hl, format!("bad `{h}`")))?;
                let mut m = [1u32; 3];
                for (k, d) in dims.iter().take(3).enumerate() {
                    m[k] = *d;
                }
                maxntid = Some(m);
            }
            Some(".minnctapersm" | ".maxnreg" | ".maxnctapersm") => {}
            _ => return Err(perr(*hl, format!("unsupported entry directive `{h}`"))),
        }
    }
    let mut b = Body {
        regs: HashMap::new(),
        nregs: 0,
        shared: Shared {
            symbols: module_shared.symbols.clone(),
            bytes: module_shared.bytes,
        },
        params: &params,
        insts: vec![],
        lines: vec![],
        texts: vec![],
        labels: HashMap::new(),
        fixups: vec![],
        call_args: HashMap::new(),
        declares_set_condition,
    };
    loop {
        let (bl, l) = lines.get(i).ok_or_else(|| perr(ln, "unterminated entry body".into()))?;
        i += 1;
        if l == "}" {
            break;
        }
        b.statement(*bl, l)?;
    }
    for (at, label, line) in std::mem::take(&mut b.fixups) {
        let target = *b
            .labels
            .get(&label)
            .ok_or_else(|| perr(line, format!("unknown label `{label}`")))?;
        b.insts[at].op = Op::Bra { target };
    }
    let f = Function {
        name,
        params: params.clone(),
        maxntid,
        nregs: b.nregs,
        insts: b.insts,
        lines: b.lines,
        texts: b.texts,
        shared_bytes: b.shared.bytes,
    };
    Ok((f, i))
}

/// Bytes of a `.param`/`.reg` type name (without the dot).
fn type_bytes(t: &str) -> Option<u32> {
    Some(match t {
        "b8" | "u8" | "s8" => 1,
        "b16" | "u16" | "s16" | "f16" | "bf16" => 2,
        "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" => 4,
        "b64" | "u64" | "s64" | "f64" => 8,
        _ => return None,
    })
}

/// An integer type name.
fn int_type(t: &str) -> Option<Int> {
    let (signed, bits) = match t.as_bytes().first()? {
        b's' => (true, &t[1..]),
        b'u' | b'b' => (false, &t[1..]),
        _ => return None,
    };
    let bits: u32 = bits.parse().ok()?;
    matches!(bits, 8 | 16 | 32 | 64).then_some(Int { bits, signed })
}

struct Body<'a> {
    regs: HashMap<String, RegRange>,
    nregs: u32,
    shared: Shared,
    params: &'a [ParamDecl],
    insts: Vec<Inst>,
    lines: Vec<usize>,
    texts: Vec<String>,
    labels: HashMap<String, u32>,
    fixups: Vec<(usize, String, usize)>,
    /// The body's call arguments (`.param` variables): their register slots and sizes.
    call_args: HashMap<String, (u32, u32)>,
    /// Whether the module declares `cudaGraphSetConditional`.
    declares_set_condition: bool,
}

/// The parts of one instruction: opcode pieces and operand strings.
struct Parts<'s> {
    line: usize,
    text: &'s str,
    opcode: &'s str,
    mods: Vec<&'s str>,
    ops: Vec<&'s str>,
}

impl Parts<'_> {
    fn err(&self, m: impl std::fmt::Display) -> EmuError {
        perr(self.line, format!("{m}: `{}`", self.text))
    }
    fn unknown(&self) -> EmuError {
        EmuError::UnknownOpcode {
            line: self.line,
            opcode: self.opcode.to_string(),
        }
    }
    fn want(&self, n: usize) -> Result<(), EmuError> {
        if self.ops.len() == n {
            Ok(())
        } else {
            Err(self.err(format!("expected {n} operands, found {}", self.ops.len())))
        }
    }
    fn has(&self, m: &str) -> bool {
        self.mods.contains(&m)
    }
    /// The last modifier: the type of most instructions.
    fn ty(&self) -> Result<&str, EmuError> {
        self.mods.last().copied().ok_or_else(|| self.err("missing type"))
    }
    /// Checks that every modifier is in `allowed`.
    fn only(&self, allowed: &[&str]) -> Result<(), EmuError> {
        match self.mods.iter().find(|m| !allowed.contains(m)) {
            Some(m) => Err(self.err(format!("unsupported modifier `.{m}`"))),
            None => Ok(()),
        }
    }
}

fn split_operands(s: &str) -> Vec<&str> {
    let mut out = vec![];
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

impl Body<'_> {
    fn statement(&mut self, line: usize, l: &str) -> Result<(), EmuError> {
        if l.starts_with(".loc ") {
            // A source line for the code that follows (debug information, no semantics).
            return Ok(());
        }
        if let Some(label) = l.strip_suffix(':') {
            self.labels.insert(label.trim().to_string(), self.insts.len() as u32);
            return Ok(());
        }
        let l = l
            .strip_suffix(';')
            .ok_or_else(|| perr(line, format!("expected `;` at the end of `{l}`")))?
            .trim();
        if l.starts_with(".reg") {
            return self.declare_reg(line, l);
        }
        if l.starts_with(".shared") {
            return self.shared.declare(line, l);
        }
        if let Some(decl) = l.strip_prefix(".param") {
            return self.declare_call_arg(line, decl);
        }
        if l.starts_with('.') {
            return Err(perr(line, format!("unsupported directive `{l}`")));
        }
        let (guard, rest) = match l.strip_prefix('@') {
            Some(g) => {
                let (p, rest) = g
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| perr(line, format!("bad guard: `{l}`")))?;
                let (neg, p) = match p.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, p),
                };
                (Some((self.reg(line, p)?, neg)), rest.trim())
            }
            None => (None, l),
        };
        let (opcode, operands) = match rest.split_once(char::is_whitespace) {
            Some((o, r)) => (o, r.trim()),
            None => (rest, ""),
        };
        let mut pieces = opcode.split('.');
        let base = pieces.next().unwrap_or("");
        let p = Parts {
            line,
            text: l,
            opcode,
            mods: pieces.collect(),
            ops: split_operands(operands),
        };
        let op = self.decode(base, &p)?;
        self.insts.push(Inst { guard, op });
        self.lines.push(line);
        self.texts.push(l.to_string());
        Ok(())
    }

    /// `.param .bN name` in a body: a call's argument, held in a register slot of its own.
    fn declare_call_arg(&mut self, line: usize, decl: &str) -> Result<(), EmuError> {
        let toks: Vec<&str> = decl.split_whitespace().collect();
        let bytes = match toks.as_slice() {
            [t, _] => type_bytes(t.trim_start_matches('.')),
            _ => None,
        }
        .ok_or_else(|| perr(line, format!("unsupported call argument `.param{decl}`")))?;
        self.call_args.insert(toks[1].to_string(), (self.nregs, bytes));
        self.nregs += 1;
        Ok(())
    }

    /// `call cudaGraphSetConditional, (handle, value)`.
    fn call(&self, p: &Parts) -> Result<Op, EmuError> {
        p.only(&["uni"])?;
        let at = p.text.find(p.opcode).map_or(0, |i| i + p.opcode.len());
        let operands = p.text[at..].trim();
        let (callee, args) = operands
            .split_once(',')
            .ok_or_else(|| p.err(format!("expected `call NAME, (ARGS)`: `{}`", p.text)))?;
        if callee.trim() != SET_CONDITION || !self.declares_set_condition {
            return Err(p.err(format!(
                "call of an undeclared or unsupported function `{}`",
                callee.trim()
            )));
        }
        let args = args
            .trim()
            .strip_prefix('(')
            .and_then(|a| a.strip_suffix(')'))
            .ok_or_else(|| p.err("expected `(handle, value)`".to_string()))?;
        let arg = |name: &str, bytes: u32| match self.call_args.get(name.trim()) {
            Some(&(reg, b)) if b == bytes => Ok(reg),
            _ => Err(p.err(format!("`{}` is not a {bytes}-byte call argument", name.trim()))),
        };
        match args.split(',').collect::<Vec<_>>().as_slice() {
            [h, v] => Ok(Op::SetCondition {
                handle: arg(h, 8)?,
                value: arg(v, 4)?,
            }),
            _ => Err(p.err("cudaGraphSetConditional takes two arguments".to_string())),
        }
    }

    fn declare_reg(&mut self, line: usize, l: &str) -> Result<(), EmuError> {
        // `.reg .TYPE %name<N>` or `.reg .TYPE %a, %b`
        let rest = l[4..].trim();
        let (ty, names) = rest
            .split_once(char::is_whitespace)
            .ok_or_else(|| perr(line, format!("bad register declaration `{l}`")))?;
        if ty != ".pred" && type_bytes(&ty[1..]).is_none() {
            return Err(perr(line, format!("unsupported register type `{ty}`")));
        }
        for n in names.split(',') {
            let n = n.trim();
            let n = n
                .strip_prefix('%')
                .ok_or_else(|| perr(line, format!("bad register name `{n}`")))?;
            let (name, count) = match n.split_once('<') {
                Some((name, c)) => (
                    name,
                    c.strip_suffix('>')
                        .and_then(|c| c.parse().ok())
                        .ok_or_else(|| perr(line, format!("bad register count `{n}`")))?,
                ),
                None => (n, 1),
            };
            self.regs.insert(
                name.to_string(),
                RegRange {
                    base: self.nregs,
                    count,
                },
            );
            self.nregs += count;
        }
        Ok(())
    }

    /// A register operand `%name` (the name with its index).
    fn reg(&self, line: usize, s: &str) -> Result<Reg, EmuError> {
        let n = s
            .strip_prefix('%')
            .ok_or_else(|| perr(line, format!("expected a register, found `{s}`")))?;
        if let Some(r) = self.regs.get(n) {
            if r.count == 1 {
                return Ok(r.base);
            }
        }
        let split = n.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, idx) = n.split_at(split);
        if let (Some(r), Ok(i)) = (self.regs.get(prefix), idx.parse::<u32>()) {
            if i < r.count {
                return Ok(r.base + i);
            }
        }
        Err(perr(line, format!("undeclared register `{s}`")))
    }

    /// A source operand: register, immediate or shared symbol.
    fn src(&self, p: &Parts, s: &str) -> Result<Src, EmuError> {
        if s.starts_with('%') {
            return self.reg(p.line, s).map(Src::Reg);
        }
        if let Some(&off) = self.shared.symbols.get(s) {
            return Ok(Src::Imm(off as u64));
        }
        parse_imm(s)
            .map(Src::Imm)
            .ok_or_else(|| p.err(format!("bad operand `{s}`")))
    }

    fn dst(&self, p: &Parts, s: &str) -> Result<Reg, EmuError> {
        self.reg(p.line, s)
    }

    /// A brace-enclosed vector `{a, b, …}` of `n` elements.
    fn vec_parts<'s>(&self, p: &Parts, s: &'s str, n: usize) -> Result<Vec<&'s str>, EmuError> {
        let inner = s
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .ok_or_else(|| p.err(format!("expected a vector operand, found `{s}`")))?;
        let v: Vec<&str> = inner.split(',').map(str::trim).collect();
        if v.len() != n {
            return Err(p.err(format!("expected {n} vector elements")));
        }
        Ok(v)
    }

    fn dst_vec<const N: usize>(&self, p: &Parts, s: &str, n: usize) -> Result<[Reg; N], EmuError> {
        let mut out = [0; N];
        for (k, e) in self.vec_parts(p, s, n)?.into_iter().enumerate() {
            out[k] = self.dst(p, e)?;
        }
        Ok(out)
    }

    fn src_vec<const N: usize>(&self, p: &Parts, s: &str, n: usize) -> Result<[Src; N], EmuError> {
        let mut out = [Src::Imm(0); N];
        for (k, e) in self.vec_parts(p, s, n)?.into_iter().enumerate() {
            out[k] = self.src(p, e)?;
        }
        Ok(out)
    }

    /// An address operand `[base]`, `[base+off]`, `[base+-off]`, `[base-off]`.
    fn addr(&self, p: &Parts, s: &str) -> Result<Addr, EmuError> {
        let inner = s
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .ok_or_else(|| p.err(format!("expected an address, found `{s}`")))?
            .trim();
        let (base, offset) = match inner[1..].find(['+', '-']).map(|k| k + 1) {
            Some(k) => {
                let (b, o) = inner.split_at(k);
                let o = o.strip_prefix('+').unwrap_or(o).trim();
                let off = parse_imm(o).ok_or_else(|| p.err(format!("bad address offset `{o}`")))? as i64;
                (b.trim(), off)
            }
            None => (inner, 0),
        };
        Ok(Addr {
            base: self.src(p, base)?,
            offset,
        })
    }

    fn decode(&mut self, base: &str, p: &Parts) -> Result<Op, EmuError> {
        match base {
            "call" => self.call(p),
            "mov" => self.mov(p),
            "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor" | "shl" | "shr" => {
                self.binary(base, p)
            }
            "neg" | "abs" | "not" | "popc" | "clz" | "brev" | "ex2" | "lg2" | "rsqrt" | "sqrt" | "rcp" | "sin"
            | "cos" | "tanh" => self.unary(base, p),
            "mad" => self.mad(p),
            "fma" => {
                p.want(4)?;
                p.only(&["rn", "ftz", "f32", "f64"])?;
                let (d, a, b, c) = (
                    self.dst(p, p.ops[0])?,
                    self.src(p, p.ops[1])?,
                    self.src(p, p.ops[2])?,
                    self.src(p, p.ops[3])?,
                );
                if !p.has("rn") {
                    return Err(p.err("fma needs a rounding modifier"));
                }
                match p.ty()? {
                    "f32" => Ok(Op::F32Fma {
                        ftz: p.has("ftz"),
                        d,
                        a,
                        b,
                        c,
                    }),
                    "f64" if !p.has("ftz") => Ok(Op::F64Fma { d, a, b, c }),
                    _ => Err(p.unknown()),
                }
            }
            "copysign" => {
                p.want(3)?;
                let (d, a, b) = (self.dst(p, p.ops[0])?, self.src(p, p.ops[1])?, self.src(p, p.ops[2])?);
                match p.mods.as_slice() {
                    ["f32"] => Ok(Op::F32 {
                        op: FOp::Copysign,
                        ftz: false,
                        d,
                        a,
                        b,
                    }),
                    ["f64"] => Ok(Op::F64 {
                        op: FOp::Copysign,
                        d,
                        a,
                        b,
                    }),
                    _ => Err(p.unknown()),
                }
            }
            "bfe" => {
                p.want(4)?;
                let ty = match p.mods.as_slice() {
                    [t] => int_type(t).filter(|t| t.bits >= 32),
                    _ => None,
                }
                .ok_or_else(|| p.unknown())?;
                Ok(Op::Bfe {
                    ty,
                    d: self.dst(p, p.ops[0])?,
                    a: self.src(p, p.ops[1])?,
                    b: self.src(p, p.ops[2])?,
                    c: self.src(p, p.ops[3])?,
                })
            }
            "selp" => {
                p.want(4)?;
                let bits = match p.mods.as_slice() {
                    [t] => type_bytes(t).map(|b| b * 8),
                    _ => None,
                }
                .ok_or_else(|| p.unknown())?;
                Ok(Op::Selp {
                    bits,
                    d: self.dst(p, p.ops[0])?,
                    a: self.src(p, p.ops[1])?,
                    b: self.src(p, p.ops[2])?,
                    p: self.src(p, p.ops[3])?,
                })
            }
            "setp" => self.setp(p),
            "testp" => {
                p.want(2)?;
                let (op, ty) = match p.mods.as_slice() {
                    [o, t] => (*o, *t),
                    _ => return Err(p.unknown()),
                };
                let op = match op {
                    "finite" => TestOp::Finite,
                    "infinite" => TestOp::Infinite,
                    "number" => TestOp::Number,
                    "notanumber" => TestOp::NotANumber,
                    "normal" => TestOp::Normal,
                    "subnormal" => TestOp::Subnormal,
                    _ => return Err(p.unknown()),
                };
                let f64 = match ty {
                    "f32" => false,
                    "f64" => true,
                    _ => return Err(p.unknown()),
                };
                Ok(Op::Testp {
                    op,
                    f64,
                    d: self.dst(p, p.ops[0])?,
                    a: self.src(p, p.ops[1])?,
                })
            }
            "cvt" => self.cvt(p),
            "cvta" => {
                p.want(2)?;
                match p.mods.as_slice() {
                    ["to", "global", "u64"] => Ok(Op::Cvta {
                        d: self.dst(p, p.ops[0])?,
                        a: self.src(p, p.ops[1])?,
                    }),
                    _ => Err(p.unknown()),
                }
            }
            "ld" => self.ld(p),
            "st" => self.st(p),
            "atom" => self.atom(p),
            "prefetch" => {
                p.want(1)?;
                match p.mods.as_slice() {
                    ["global", "L2"] => Ok(Op::Prefetch {
                        addr: self.addr(p, p.ops[0])?,
                    }),
                    _ => Err(p.unknown()),
                }
            }
            "cp" => self.cp_async(p),
            "bra" => {
                p.want(1)?;
                p.only(&["uni"])?;
                self.fixups.push((self.insts.len(), p.ops[0].to_string(), p.line));
                Ok(Op::Bra { target: 0 })
            }
            "ret" | "exit" => {
                p.want(0)?;
                p.only(&[])?;
                Ok(Op::Exit)
            }
            "bar" | "barrier" => {
                p.want(1)?;
                match p.mods.as_slice() {
                    ["sync"] | ["sync", "aligned"] => {}
                    _ => return Err(p.unknown()),
                }
                match self.src(p, p.ops[0])? {
                    Src::Imm(0) => Ok(Op::Bar),
                    _ => Err(p.err("only barrier 0 is supported")),
                }
            }
            "shfl" => self.shfl(p),
            "mma" => self.mma(p),
            "ldmatrix" => self.ldmatrix(p),
            _ => Err(p.unknown()),
        }
    }

    fn mov(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(2)?;
        let ty = match p.mods.as_slice() {
            [t] => *t,
            _ => return Err(p.unknown()),
        };
        let bits = if ty == "pred" {
            1
        } else {
            type_bytes(ty).ok_or_else(|| p.unknown())? * 8
        };
        let (d, a) = (p.ops[0], p.ops[1]);
        if let Some(s) = a.strip_prefix('%').and_then(sreg) {
            return Ok(Op::Sreg { d: self.dst(p, d)?, s });
        }
        if a.starts_with('{') {
            let n = a.split(',').count();
            let parts = self.src_vec::<4>(p, a, n)?;
            return Ok(Op::Pack {
                d: self.dst(p, d)?,
                parts,
                n: n as u8,
                part: bits / n as u32,
            });
        }
        if d.starts_with('{') {
            let n = d.split(',').count();
            return Ok(Op::Unpack {
                d: self.dst_vec::<4>(p, d, n)?,
                a: self.src(p, a)?,
                n: n as u8,
                part: bits / n as u32,
            });
        }
        Ok(Op::Mov {
            d: self.dst(p, d)?,
            a: self.src(p, a)?,
            bits,
        })
    }

    fn binary(&self, base: &str, p: &Parts) -> Result<Op, EmuError> {
        p.want(3)?;
        let ty = p.ty()?;
        let (d, a, b) = (self.dst(p, p.ops[0])?, self.src(p, p.ops[1])?, self.src(p, p.ops[2])?);
        if ty == "pred" {
            p.want(3)?;
            let op = match (base, p.mods.len()) {
                ("and", 1) => BoolOp::And,
                ("or", 1) => BoolOp::Or,
                ("xor", 1) => BoolOp::Xor,
                _ => return Err(p.unknown()),
            };
            return Ok(Op::PredBin { op, d, a, b });
        }
        if ty == "f32" || ty == "f64" {
            let op = match base {
                "add" => FOp::Add,
                "sub" => FOp::Sub,
                "mul" => FOp::Mul,
                "div" => FOp::Div,
                "min" if p.has("NaN") => FOp::MinNaN,
                "max" if p.has("NaN") => FOp::MaxNaN,
                "min" => FOp::Min,
                "max" => FOp::Max,
                _ => return Err(p.unknown()),
            };
            match op {
                FOp::Div => p.only(&["rn", "approx", "full", "ftz", ty])?,
                FOp::Min | FOp::Max | FOp::MinNaN | FOp::MaxNaN => p.only(&["NaN", "ftz", ty])?,
                _ => p.only(&["rn", "ftz", ty])?,
            }
            if ty == "f64" {
                if p.has("ftz") || p.has("approx") || p.has("full") {
                    return Err(p.unknown());
                }
                return Ok(Op::F64 { op, d, a, b });
            }
            return Ok(Op::F32 {
                op,
                ftz: p.has("ftz"),
                d,
                a,
                b,
            });
        }
        let it = int_type(ty).ok_or_else(|| p.unknown())?;
        let op = match base {
            "add" => IntOp::Add,
            "sub" => IntOp::Sub,
            "mul" if p.has("lo") => IntOp::MulLo,
            "mul" if p.has("hi") => IntOp::MulHi,
            "mul" if p.has("wide") => {
                p.only(&["wide", ty])?;
                return Ok(Op::MulWide { ty: it, d, a, b });
            }
            "div" => IntOp::Div,
            "rem" => IntOp::Rem,
            "min" => IntOp::Min,
            "max" => IntOp::Max,
            "and" => IntOp::And,
            "or" => IntOp::Or,
            "xor" => IntOp::Xor,
            "shl" => IntOp::Shl,
            "shr" => IntOp::Shr,
            _ => return Err(p.unknown()),
        };
        p.only(&["lo", "hi", ty])?;
        Ok(Op::Int { op, ty: it, d, a, b })
    }

    fn unary(&self, base: &str, p: &Parts) -> Result<Op, EmuError> {
        p.want(2)?;
        let ty = p.ty()?;
        let (d, a) = (self.dst(p, p.ops[0])?, self.src(p, p.ops[1])?);
        if ty == "pred" && base == "not" && p.mods.len() == 1 {
            return Ok(Op::PredNot { d, a });
        }
        if ty == "f32" || ty == "f64" {
            let (op, allowed): (FUnOp, &[&str]) = match base {
                "neg" => (FUnOp::Neg, &["ftz"]),
                "abs" => (FUnOp::Abs, &["ftz"]),
                "ex2" => (FUnOp::Ex2, &["approx", "ftz"]),
                "lg2" => (FUnOp::Lg2, &["approx", "ftz"]),
                "rsqrt" => (FUnOp::Rsqrt, &["approx", "ftz"]),
                "sqrt" => (FUnOp::Sqrt, &["rn", "approx", "ftz"]),
                "rcp" => (FUnOp::Rcp, &["rn", "approx", "ftz"]),
                "sin" => (FUnOp::Sin, &["approx", "ftz"]),
                "cos" => (FUnOp::Cos, &["approx", "ftz"]),
                "tanh" => (FUnOp::Tanh, &["approx"]),
                _ => return Err(p.unknown()),
            };
            let mut allowed = allowed.to_vec();
            allowed.push(ty);
            p.only(&allowed)?;
            if ty == "f64" {
                if p.has("ftz") {
                    return Err(p.unknown());
                }
                return Ok(Op::F64Un { op, d, a });
            }
            return Ok(Op::F32Un {
                op,
                ftz: p.has("ftz"),
                d,
                a,
            });
        }
        let it = int_type(ty).ok_or_else(|| p.unknown())?;
        p.only(&[ty])?;
        let op = match base {
            "neg" => IntUnOp::Neg,
            "abs" => IntUnOp::Abs,
            "not" => IntUnOp::Not,
            "popc" => IntUnOp::Popc,
            "clz" => IntUnOp::Clz,
            "brev" => IntUnOp::Brev,
            _ => return Err(p.unknown()),
        };
        Ok(Op::IntUn { op, ty: it, d, a })
    }

    fn mad(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(4)?;
        let ty = p.ty()?;
        let (d, a, b, c) = (
            self.dst(p, p.ops[0])?,
            self.src(p, p.ops[1])?,
            self.src(p, p.ops[2])?,
            self.src(p, p.ops[3])?,
        );
        if ty == "f32" {
            p.only(&["rn", "ftz", "f32"])?;
            if !p.has("rn") {
                return Err(p.err("mad.f32 needs .rn"));
            }
            return Ok(Op::F32Fma {
                ftz: p.has("ftz"),
                d,
                a,
                b,
                c,
            });
        }
        let it = int_type(ty).ok_or_else(|| p.unknown())?;
        match p.mods.as_slice() {
            ["lo", _] => Ok(Op::MadLo { ty: it, d, a, b, c }),
            ["wide", _] if it.bits <= 32 => Ok(Op::MadWide { ty: it, d, a, b, c }),
            _ => Err(p.unknown()),
        }
    }

    fn setp(&self, p: &Parts) -> Result<Op, EmuError> {
        let (cmp, rest) = p.mods.split_first().ok_or_else(|| p.unknown())?;
        let cmp = match *cmp {
            "eq" => Cmp::Eq,
            "ne" => Cmp::Ne,
            "lt" | "lo" => Cmp::Lt,
            "le" | "ls" => Cmp::Le,
            "gt" | "hi" => Cmp::Gt,
            "ge" | "hs" => Cmp::Ge,
            "equ" => Cmp::Equ,
            "neu" => Cmp::Neu,
            "ltu" => Cmp::Ltu,
            "leu" => Cmp::Leu,
            "gtu" => Cmp::Gtu,
            "geu" => Cmp::Geu,
            "num" => Cmp::Num,
            "nan" => Cmp::Nan,
            _ => return Err(p.unknown()),
        };
        let ty = p.ty()?;
        let middle = &rest[..rest.len().saturating_sub(1)];
        let mut bool_op = None;
        let mut ftz = false;
        for m in middle {
            match *m {
                "and" => bool_op = Some(BoolOp::And),
                "or" => bool_op = Some(BoolOp::Or),
                "xor" => bool_op = Some(BoolOp::Xor),
                "ftz" => ftz = true,
                _ => return Err(p.err(format!("unsupported modifier `.{m}`"))),
            }
        }
        let cty = match ty {
            "f32" => CmpTy::F32,
            "f64" => CmpTy::F64,
            t => CmpTy::Int(int_type(t).ok_or_else(|| p.unknown())?),
        };
        if matches!(cty, CmpTy::Int(_)) && !matches!(cmp, Cmp::Eq | Cmp::Ne | Cmp::Lt | Cmp::Le | Cmp::Gt | Cmp::Ge) {
            return Err(p.unknown());
        }
        let want = if bool_op.is_some() { 4 } else { 3 };
        p.want(want)?;
        let (d, dn) = match p.ops[0].split_once('|') {
            Some((d, q)) => (self.dst(p, d)?, Some(self.dst(p, q)?)),
            None => (self.dst(p, p.ops[0])?, None),
        };
        let comb = match bool_op {
            Some(op) => {
                let c = p.ops[3];
                let (neg, c) = match c.strip_prefix('!') {
                    Some(c) => (true, c),
                    None => (false, c),
                };
                Some((op, self.src(p, c)?, neg))
            }
            None => None,
        };
        Ok(Op::Setp {
            cmp,
            ty: cty,
            ftz,
            d,
            dn,
            a: self.src(p, p.ops[1])?,
            b: self.src(p, p.ops[2])?,
            comb,
        })
    }

    fn cvt(&self, p: &Parts) -> Result<Op, EmuError> {
        let mut rnd = Rnd::Default;
        let (mut sat, mut ftz, mut relu, mut rs) = (false, false, false, false);
        let mut types = vec![];
        for m in &p.mods {
            match *m {
                "rn" => rnd = Rnd::Rn,
                "rna" => rnd = Rnd::Rna,
                "rz" => rnd = Rnd::Rz,
                "rm" => rnd = Rnd::Rm,
                "rp" => rnd = Rnd::Rp,
                "rni" => rnd = Rnd::Rni,
                "rzi" => rnd = Rnd::Rzi,
                "rmi" => rnd = Rnd::Rmi,
                "rpi" => rnd = Rnd::Rpi,
                "rs" => rs = true,
                "sat" | "satfinite" => sat = true,
                "ftz" => ftz = true,
                "relu" => relu = true,
                t => types.push(t),
            }
        }
        let [to, from] = types.as_slice() else {
            return Err(p.unknown());
        };
        let packed = |t: &str| match t {
            "f16x2" => Some(Packed::F16x2),
            "bf16x2" => Some(Packed::Bf16x2),
            "e4m3x2" => Some(Packed::E4m3x2),
            "e4m3x4" => Some(Packed::E4m3x4),
            _ => None,
        };
        if let Some(pk) = packed(to) {
            if *from == "e4m3x2" && pk == Packed::F16x2 && rnd == Rnd::Rn && !rs && !sat && !relu && !ftz {
                p.want(2)?;
                return Ok(Op::CvtUnpackE4m3 {
                    d: self.dst(p, p.ops[0])?,
                    a: self.src(p, p.ops[1])?,
                });
            }
            if *from != "f32" || ftz {
                return Err(p.unknown());
            }
            if rs {
                let xs = match pk {
                    Packed::E4m3x4 => {
                        p.want(3)?;
                        self.src_vec::<4>(p, p.ops[1], 4)?
                    }
                    Packed::E4m3x2 => return Err(p.unknown()),
                    _ => {
                        p.want(4)?;
                        [self.src(p, p.ops[1])?, self.src(p, p.ops[2])?, Src::Imm(0), Src::Imm(0)]
                    }
                };
                let rbits = self.src(p, p.ops.last().copied().unwrap_or_default())?;
                return Ok(Op::CvtRs {
                    to: pk,
                    relu,
                    sat,
                    d: self.dst(p, p.ops[0])?,
                    xs,
                    rbits,
                });
            }
            if pk == Packed::E4m3x4 || !matches!(rnd, Rnd::Rn | Rnd::Rz) {
                return Err(p.unknown());
            }
            p.want(3)?;
            return Ok(Op::CvtPack {
                to: pk,
                rnd,
                sat,
                relu,
                d: self.dst(p, p.ops[0])?,
                a: self.src(p, p.ops[1])?,
                b: self.src(p, p.ops[2])?,
            });
        }
        if rs || relu {
            return Err(p.unknown());
        }
        let num = |t: &str| match t {
            "f16" => Some(Num::F16),
            "bf16" => Some(Num::Bf16),
            "tf32" => Some(Num::Tf32),
            "f32" => Some(Num::F32),
            "f64" => Some(Num::F64),
            t => int_type(t).map(Num::Int),
        };
        let (to, from) = (
            num(to).ok_or_else(|| p.unknown())?,
            num(from).ok_or_else(|| p.unknown())?,
        );
        let conv = Conv {
            to,
            from,
            rnd,
            sat,
            ftz,
        };
        crate::float::check_conv(conv).map_err(|m| p.err(m))?;
        p.want(2)?;
        Ok(Op::Cvt {
            conv,
            d: self.dst(p, p.ops[0])?,
            a: self.src(p, p.ops[1])?,
        })
    }

    /// `(space, vector length, element bytes)` of a `ld`/`st` opcode.
    fn access(&self, p: &Parts) -> Result<(Option<Space>, u8, u32), EmuError> {
        let mut space = None;
        let mut n = 1u8;
        let mut is_param = false;
        let ty = p.ty()?;
        for m in &p.mods[..p.mods.len() - 1] {
            match *m {
                "global" => space = Some(Space::Global),
                "shared" => space = Some(Space::Shared),
                "param" => is_param = true,
                "nc" | "ca" | "cg" | "cs" | "lu" | "cv" | "wb" | "wt" => {}
                "v2" => n = 2,
                "v4" => n = 4,
                m => return Err(p.err(format!("unsupported modifier `.{m}`"))),
            }
        }
        if space.is_none() && !is_param {
            return Err(p.err("only .global, .shared and .param accesses are supported"));
        }
        let bytes = type_bytes(ty).ok_or_else(|| p.unknown())?;
        if int_type(ty).is_some_and(|i| i.signed && i.bits < 32) {
            return Err(p.err("sign-extending loads are not supported"));
        }
        Ok((space, n, bytes))
    }

    fn ld(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(2)?;
        let (space, n, bytes) = self.access(p)?;
        let Some(space) = space else {
            let name = p.ops[1].trim_start_matches('[').trim_end_matches(']').trim();
            let param = self
                .params
                .iter()
                .position(|q| q.name == name)
                .ok_or_else(|| p.err(format!("unknown parameter `{name}`")))?;
            if n != 1 || self.params[param].bytes != bytes {
                return Err(p.err(format!(
                    "parameter `{name}` has {} bytes, loaded as {bytes}",
                    self.params[param].bytes
                )));
            }
            return Ok(Op::LdParam {
                d: self.dst(p, p.ops[0])?,
                param: param as u32,
                bytes,
            });
        };
        let d = if n == 1 {
            [self.dst(p, p.ops[0])?, 0, 0, 0]
        } else {
            self.dst_vec::<4>(p, p.ops[0], n as usize)?
        };
        Ok(Op::Ld {
            space,
            bytes,
            n,
            d,
            addr: self.addr(p, p.ops[1])?,
        })
    }

    fn st(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(2)?;
        let (space, n, bytes) = self.access(p)?;
        let Some(space) = space else {
            // A call's argument: a move into the register slot that holds it.
            let name = p.ops[0].trim_start_matches('[').trim_end_matches(']').trim();
            let &(d, b) = self
                .call_args
                .get(name)
                .ok_or_else(|| p.err(format!("store to `{name}`, which is not a call argument")))?;
            if n != 1 || b != bytes {
                return Err(p.err(format!("call argument `{name}` has {b} bytes, stored as {bytes}")));
            }
            return Ok(Op::Mov {
                d,
                a: self.src(p, p.ops[1])?,
                bits: bytes * 8,
            });
        };
        let s = if n == 1 {
            [self.src(p, p.ops[1])?, Src::Imm(0), Src::Imm(0), Src::Imm(0)]
        } else {
            self.src_vec::<4>(p, p.ops[1], n as usize)?
        };
        Ok(Op::St {
            space,
            bytes,
            n,
            s,
            addr: self.addr(p, p.ops[0])?,
        })
    }

    fn atom(&self, p: &Parts) -> Result<Op, EmuError> {
        let (op, ty) = match p.mods.as_slice() {
            ["global", op, ty] => (*op, *ty),
            _ => return Err(p.unknown()),
        };
        let op = match (op, ty) {
            ("add", "f32") => AtomOp::AddF32,
            (op, t) => {
                let it = int_type(t).filter(|t| t.bits >= 32).ok_or_else(|| p.unknown())?;
                match op {
                    "add" => AtomOp::Add(it),
                    "min" => AtomOp::Min(it),
                    "max" => AtomOp::Max(it),
                    "exch" => AtomOp::Exch(it),
                    "and" => AtomOp::And(it),
                    "or" => AtomOp::Or(it),
                    "xor" => AtomOp::Xor(it),
                    "cas" => AtomOp::Cas(it),
                    _ => return Err(p.unknown()),
                }
            }
        };
        let cas = matches!(op, AtomOp::Cas(_));
        p.want(if cas { 4 } else { 3 })?;
        Ok(Op::Atom {
            op,
            d: self.dst(p, p.ops[0])?,
            addr: self.addr(p, p.ops[1])?,
            b: self.src(p, p.ops[2])?,
            c: if cas { self.src(p, p.ops[3])? } else { Src::Imm(0) },
        })
    }

    /// `cp.async.{ca,cg}.shared.global`, `cp.async.commit_group`, `cp.async.wait_group N`,
    /// `cp.async.wait_all`.
    fn cp_async(&self, p: &Parts) -> Result<Op, EmuError> {
        match p.mods.as_slice() {
            ["async", cache @ ("ca" | "cg"), "shared", "global"] => {
                if !(3..=4).contains(&p.ops.len()) {
                    return Err(p.err(format!("expected 3 or 4 operands, found {}", p.ops.len())));
                }
                let bytes = match (*cache, parse_imm(p.ops[2])) {
                    ("ca", Some(b @ (4 | 8 | 16))) | ("cg", Some(b @ 16)) => b as u32,
                    _ => return Err(p.err(format!("bad cp-size `{}` for .{cache}", p.ops[2]))),
                };
                Ok(Op::CpAsync {
                    bytes,
                    dst: self.addr(p, p.ops[0])?,
                    src: self.addr(p, p.ops[1])?,
                    src_bytes: p.ops.get(3).map(|s| self.src(p, s)).transpose()?,
                })
            }
            ["async", "commit_group"] => p.want(0).map(|_| Op::CpAsyncCommit),
            ["async", "wait_group"] => {
                p.want(1)?;
                match parse_imm(p.ops[0]) {
                    Some(n) if n <= u32::MAX as u64 => Ok(Op::CpAsyncWait { n: n as u32 }),
                    _ => Err(p.err("cp.async.wait_group needs an immediate group count")),
                }
            }
            ["async", "wait_all"] => p.want(0).map(|_| Op::CpAsyncWaitAll),
            _ => Err(p.unknown()),
        }
    }

    fn shfl(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(5)?;
        let mode = match p.mods.as_slice() {
            ["sync", m, "b32"] => match *m {
                "up" => ShflMode::Up,
                "down" => ShflMode::Down,
                "bfly" => ShflMode::Bfly,
                "idx" => ShflMode::Idx,
                _ => return Err(p.unknown()),
            },
            _ => return Err(p.unknown()),
        };
        let (d, dp) = match p.ops[0].split_once('|') {
            Some((d, q)) => (self.dst(p, d)?, Some(self.dst(p, q)?)),
            None => (self.dst(p, p.ops[0])?, None),
        };
        Ok(Op::Shfl {
            mode,
            d,
            dp,
            a: self.src(p, p.ops[1])?,
            b: self.src(p, p.ops[2])?,
            c: self.src(p, p.ops[3])?,
            mask: self.src(p, p.ops[4])?,
        })
    }

    fn mma(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(4)?;
        let kind = match p.mods.as_slice() {
            ["sync", "aligned", "m16n8k8", "row", "col", "f32", "tf32", "tf32", "f32"] => MmaKind::Tf32,
            ["sync", "aligned", "m16n8k16", "row", "col", "f32", "bf16", "bf16", "f32"] => MmaKind::Bf16,
            ["sync", "aligned", "m16n8k16", "row", "col", "f32", "f16", "f16", "f32"] => MmaKind::F16,
            _ => return Err(p.unknown()),
        };
        Ok(Op::Mma {
            kind,
            d: self.dst_vec::<4>(p, p.ops[0], 4)?,
            a: self.src_vec::<4>(p, p.ops[1], 4)?,
            b: self.src_vec::<2>(p, p.ops[2], 2)?,
            c: self.src_vec::<4>(p, p.ops[3], 4)?,
        })
    }

    fn ldmatrix(&self, p: &Parts) -> Result<Op, EmuError> {
        p.want(2)?;
        let mods: Vec<&str> = p.mods.iter().map(|m| m.trim_end_matches("::cta")).collect();
        let (n, trans) = match mods.as_slice() {
            ["sync", "aligned", "m8n8", x, rest @ ..] => {
                let n = match *x {
                    "x1" => 1,
                    "x2" => 2,
                    "x4" => 4,
                    _ => return Err(p.unknown()),
                };
                match rest {
                    ["trans", "shared", "b16"] => (n, true),
                    ["shared", "b16"] => (n, false),
                    _ => return Err(p.unknown()),
                }
            }
            _ => return Err(p.unknown()),
        };
        let d = if n == 1 && !p.ops[0].starts_with('{') {
            [self.dst(p, p.ops[0])?, 0, 0, 0]
        } else {
            self.dst_vec::<4>(p, p.ops[0], n as usize)?
        };
        Ok(Op::Ldmatrix {
            n,
            trans,
            d,
            addr: self.addr(p, p.ops[1])?,
        })
    }
}

/// A special register name (without `%`).
fn sreg(s: &str) -> Option<Sreg> {
    let dim = |d: &str| match d {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    match s.split_once('.') {
        Some(("tid", d)) => dim(d).map(Sreg::Tid),
        Some(("ntid", d)) => dim(d).map(Sreg::Ntid),
        Some(("ctaid", d)) => dim(d).map(Sreg::Ctaid),
        Some(("nctaid", d)) => dim(d).map(Sreg::Nctaid),
        None if s == "laneid" => Some(Sreg::Laneid),
        None if s == "warpid" => Some(Sreg::Warpid),
        _ => None,
    }
}

/// An immediate: decimal or hex integer, `0fXXXXXXXX` (f32 bits), `0dXXXXXXXXXXXXXXXX`
/// (f64 bits).
fn parse_imm(s: &str) -> Option<u64> {
    let (neg, t) = match s.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, s),
    };
    let v = if let Some(h) = t.strip_prefix("0f").or_else(|| t.strip_prefix("0F")) {
        (h.len() == 8).then(|| u32::from_str_radix(h, 16).ok())?? as u64
    } else if let Some(h) = t.strip_prefix("0d").or_else(|| t.strip_prefix("0D")) {
        (h.len() == 16).then(|| u64::from_str_radix(h, 16).ok())??
    } else if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h.trim_end_matches('U'), 16).ok()?
    } else {
        t.trim_end_matches('U').parse::<u64>().ok()?
    };
    Some(if neg { v.wrapping_neg() } else { v })
}
