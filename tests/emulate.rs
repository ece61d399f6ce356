//! A CPU emulator of verified kernel IR modules, for checking templates on a machine without a
//! GPU: every block of every launch runs its threads in lockstep, statement by statement, with a
//! per-thread active mask for `if` and loops. Warp-wide statements (`ldmatrix`, `mma`,
//! `warp_reduce`) act on the 32 lanes of each warp as the PTX ISA defines them (the fragment
//! orders are the `irc_layout` atoms). Values are f64, rounded to the element type at every cast
//! and every store; index arithmetic is i64.
//!
//! Asynchronous copies (`cp.async`) are modelled as the PTX ISA defines them: each thread's
//! copies read their source when issued, join its uncommitted group, and land in shared memory
//! only when a `cp.async.wait` retires their group. Reading or writing a shared element while a
//! copy into it is pending panics: that catches a missing wait (a read before the data lands)
//! and a copy issued into a stage that is still being read (in lockstep, the read comes after
//! the issue).
//!
//! What lockstep cannot see: a missing `sync` (every statement finishes in every thread before
//! the next starts) and races between blocks.

use irc_ir::DType;
use irc_kir::{self as kir, Builtin, Expr, IdxOp, Intrinsic, Space, Stmt};
use irc_layout::{
    IntTuple, mma_m16n8k8_tf32_a, mma_m16n8k8_tf32_b, mma_m16n8k16_a, mma_m16n8k16_b,
    mma_m16n8k16_c,
};
use std::collections::{HashMap, VecDeque};

/// The scalar semantics: each `Func` and reduction on f64 values.
#[path = "emulate_math.rs"]
mod math;
use math::{call, reduce};

/// Runs `k` (lowered from `g`) on seeded random inputs (`seed`), and `g` on the interpreter:
/// the kernels' first result and the interpreter's, as tensors of the result's type.
#[allow(dead_code)]
pub fn against_interpreter(
    g: &irc_ir::Graph,
    k: &kir::Module,
    seed: u64,
) -> (irc_interp::tensor::Tensor, irc_interp::tensor::Tensor) {
    against_interpreter_all(g, k, seed).swap_remove(0)
}

/// [`against_interpreter`] for every result of the graph, in `return` order.
pub fn against_interpreter_all(
    g: &irc_ir::Graph,
    k: &kir::Module,
    seed: u64,
) -> Vec<(irc_interp::tensor::Tensor, irc_interp::tensor::Tensor)> {
    let inputs = g
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| irc_interp::random::random_tensor(g.ty(p), seed, i as u64))
        .collect();
    against_interpreter_on(g, k, inputs)
}

/// [`against_interpreter_all`] on the given inputs (one per parameter, in order).
pub fn against_interpreter_on(
    g: &irc_ir::Graph,
    k: &kir::Module,
    inputs: Vec<irc_interp::tensor::Tensor>,
) -> Vec<(irc_interp::tensor::Tensor, irc_interp::tensor::Tensor)> {
    use irc_interp::tensor::{Data, Tensor};
    let by_name: HashMap<String, Vec<f64>> = k
        .buffers
        .iter()
        .zip(&inputs)
        .map(|(b, t)| (b.name.clone(), t.data.to_f64()))
        .collect();
    let out = run(k, &by_name);
    let reference = irc_interp::run_graph(g, inputs).expect("interprets");
    g.results
        .iter()
        .zip(&k.results)
        .zip(reference)
        .map(|((&r, buffer), want)| {
            let ty = g.ty(r).clone();
            let got = Tensor::new(ty.clone(), Data::from_f64(ty.dtype, out[buffer].clone()))
                .expect("the result's type");
            (got, want)
        })
        .collect()
}

/// Asserts that each pair of [`against_interpreter_all`] (the kernels' result, the
/// interpreter's) agrees within the result dtype's tolerance; `what` names the case.
#[allow(dead_code)]
#[track_caller]
pub fn assert_agree(
    pairs: Vec<(irc_interp::tensor::Tensor, irc_interp::tensor::Tensor)>,
    what: &str,
) {
    for (i, (got, want)) in pairs.into_iter().enumerate() {
        let cmp = irc_interp::compare::compare(&got, &want).expect("comparable results");
        assert!(cmp.passed(), "{what} result {i}: {cmp:?}");
    }
}

/// One element an asynchronous copy will write: (shared tensor key, offset, value).
type Landing = (String, usize, f64);

/// A thread's asynchronous copies: the uncommitted group and the committed ones, oldest first.
#[derive(Clone, Default)]
struct AsyncCopies {
    open: Vec<Landing>,
    groups: VecDeque<Vec<Landing>>,
}

/// Rounds `x` to an element type.
pub fn round(d: DType, x: f64) -> f64 {
    match d {
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        DType::F32 => x as f32 as f64,
        DType::F64 => x,
        DType::I1 => f64::from(u8::from(x != 0.0)),
        DType::I32 if x.is_nan() => 0.0,
        DType::I32 => x.trunc().clamp(i32::MIN as f64, i32::MAX as f64),
        DType::I64 if x.is_nan() => 0.0,
        DType::I64 => x.trunc(),
    }
}

/// Runs every launch of `m` on the given input buffers (by name, values as f64); returns every
/// buffer after the last launch.
pub fn run(m: &kir::Module, inputs: &HashMap<String, Vec<f64>>) -> HashMap<String, Vec<f64>> {
    let mut mem: HashMap<String, Vec<f64>> = HashMap::new();
    for b in &m.buffers {
        let v = inputs
            .get(&b.name)
            .cloned()
            .unwrap_or_else(|| vec![0.0; b.elements() as usize]);
        mem.insert(b.name.clone(), v);
    }
    for c in &m.constants {
        mem.insert(format!("const:{}", c.name), c.values.clone());
    }
    for l in &m.launches {
        let k = m
            .kernels
            .iter()
            .find(|k| k.name == l.kernel)
            .expect("kernel");
        let [gx, gy, gz] = k.grid;
        let ids = (0..gz).flat_map(|z| (0..gy).flat_map(move |y| (0..gx).map(move |x| [x, y, z])));
        if !kir::cooperative(k) {
            for bid in ids {
                Block::new(k, &l.args, bid).run(&k.body, &mut mem);
            }
            continue;
        }
        // A cooperative launch: every block runs up to a top-level statement that waits on
        // the others (`counter.wait`), then every block goes on to the next.
        let mut blocks: Vec<Block> = ids.map(|bid| Block::new(k, &l.args, bid)).collect();
        for phase in phases(&k.body) {
            for b in &mut blocks {
                b.run(phase, &mut mem);
            }
        }
    }
    // The next launch finds a zeroed buffer (an arrival counter) zero again.
    for b in m
        .buffers
        .iter()
        .filter(|b| b.kind == kir::BufferKind::Zeroed)
    {
        assert!(
            mem[&b.name].iter().all(|&x| x == 0.0),
            "zeroed buffer %{} is not zero after the launches",
            b.name
        );
    }
    mem
}

/// A cooperative kernel's body cut before each top-level statement that contains a
/// `counter.wait`.
fn phases(body: &[Stmt]) -> Vec<&[Stmt]> {
    let waits = |s: &Stmt| {
        let mut w = false;
        kir::walk(std::slice::from_ref(s), &mut |s| {
            w |= matches!(
                s,
                Stmt::Intrinsic {
                    op: Intrinsic::CounterWait,
                    ..
                }
            );
        });
        w
    };
    let mut out = vec![];
    let mut start = 0;
    for (i, s) in body.iter().enumerate() {
        if i > start && waits(s) {
            out.push(&body[start..i]);
            start = i;
        }
    }
    out.push(&body[start..]);
    out
}

#[derive(Clone, Copy, Debug)]
enum Val {
    I(i64),
    F(f64),
}

impl Val {
    fn f(self) -> f64 {
        match self {
            Val::I(i) => i as f64,
            Val::F(x) => x,
        }
    }
    fn i(self) -> i64 {
        match self {
            Val::I(i) => i,
            Val::F(x) => x as i64,
        }
    }
}

/// Where a tensor's elements live: a memory key and the tensor's offset terms.
struct Place {
    key: String,
    /// Per-thread storage (registers) or shared by the block.
    per_thread: bool,
    dtype: DType,
    offset: i64,
    layout: irc_layout::Layout,
}

struct Block<'k> {
    k: &'k kir::Kernel,
    bid: [u32; 3],
    places: HashMap<String, Place>,
    vars: Vec<HashMap<String, Val>>,
    /// The element type of each scalar declared with one.
    types: HashMap<String, DType>,
    regs: Vec<HashMap<String, Vec<f64>>>,
    shared: HashMap<String, Vec<f64>>,
    atoms: [Vec<(i64, i64)>; 5],
    copies: Vec<AsyncCopies>,
    /// How many pending copies write each shared element.
    pending: HashMap<(String, usize), u32>,
}

impl<'k> Block<'k> {
    fn new(k: &'k kir::Kernel, args: &[String], bid: [u32; 3]) -> Self {
        let n = k.block[0] as usize;
        let mut places = HashMap::new();
        let mut regs = vec![HashMap::new(); n];
        let mut shared = HashMap::new();
        for t in &k.tensors {
            let (key, per_thread) = match &t.space {
                Space::Global(p) => {
                    let i = k.params.iter().position(|x| &x.name == p).expect("param");
                    (args[i].clone(), false)
                }
                Space::Const(c) => (format!("const:{c}"), false),
                Space::Shared => {
                    let size = t.layout.cosize().expect("cosize") as usize;
                    shared.insert(t.name.clone(), vec![0.0; size]);
                    (t.name.clone(), false)
                }
                Space::Registers => {
                    let size = t.layout.cosize().expect("cosize") as usize;
                    for r in regs.iter_mut() {
                        r.insert(t.name.clone(), vec![0.0; size]);
                    }
                    (t.name.clone(), true)
                }
                Space::View(b) => {
                    let base: &Place = &places[b];
                    (base.key.clone(), base.per_thread)
                }
            };
            places.insert(
                t.name.clone(),
                Place {
                    key,
                    per_thread,
                    dtype: t.dtype,
                    offset: t.offset,
                    layout: t.layout.clone(),
                },
            );
        }
        let table = |l: &irc_layout::Layout, rows: i64, vals: i64| {
            let mut out = vec![(0, 0); 32 * vals as usize];
            for t in 0..32 {
                for v in 0..vals {
                    let idx = l.crd2idx(&IntTuple::ints(&[t, v])).expect("atom");
                    out[(t * vals + v) as usize] = (idx % rows, idx / rows);
                }
            }
            out
        };
        let atoms = [
            table(mma_m16n8k16_a().unwrap().layout(), 16, 8),
            table(mma_m16n8k16_b().unwrap().layout(), 8, 4),
            table(mma_m16n8k16_c().unwrap().layout(), 16, 4),
            table(mma_m16n8k8_tf32_a().unwrap().layout(), 16, 4),
            table(mma_m16n8k8_tf32_b().unwrap().layout(), 8, 2),
        ];
        Block {
            k,
            bid,
            places,
            vars: vec![HashMap::new(); n],
            types: HashMap::new(),
            regs,
            shared,
            atoms,
            copies: vec![AsyncCopies::default(); n],
            pending: HashMap::new(),
        }
    }

    fn run(&mut self, body: &[Stmt], mem: &mut HashMap<String, Vec<f64>>) {
        let mask = vec![true; self.vars.len()];
        self.stmts(body, &mask, mem);
    }

    fn offset(&self, t: &str, coord: &[i64]) -> i64 {
        let p = &self.places[t];
        let terms = kir::offset_terms(&p.layout, coord.len()).expect("offset terms");
        let mut off = p.offset;
        for term in terms {
            let mut c = coord[term.coord] / term.div;
            if let Some(m) = term.modulo {
                c %= m;
            }
            off += c * term.stride;
        }
        off
    }

    fn read(&self, t: &str, coord: &[i64], th: usize, mem: &HashMap<String, Vec<f64>>) -> f64 {
        let off = self.offset(t, coord) as usize;
        let p = &self.places[t];
        if p.per_thread {
            self.regs[th][&p.key][off]
        } else if self.shared.contains_key(&p.key) {
            self.shared_at(&p.key, off)
        } else {
            mem[&p.key][off]
        }
    }

    fn write(
        &mut self,
        t: &str,
        coord: &[i64],
        th: usize,
        x: f64,
        mem: &mut HashMap<String, Vec<f64>>,
    ) {
        let off = self.offset(t, coord) as usize;
        let p = &self.places[t];
        let x = round(p.dtype, x);
        let key = p.key.clone();
        self.not_pending(&key, off, "writes");
        if p.per_thread {
            self.regs[th].get_mut(&key).unwrap()[off] = x;
        } else if let Some(s) = self.shared.get_mut(&key) {
            s[off] = x;
        } else {
            mem.get_mut(&key).unwrap()[off] = x;
        }
    }

    /// Element `off` of shared tensor `key`, which no pending copy may be about to write.
    fn shared_at(&self, key: &str, off: usize) -> f64 {
        self.not_pending(key, off, "reads");
        self.shared[key][off]
    }

    fn not_pending(&self, key: &str, off: usize, what: &str) {
        if !self.pending.is_empty() && self.pending.contains_key(&(key.to_string(), off)) {
            panic!("a thread {what} shared %{key}[{off}] while a cp.async into it is pending");
        }
    }

    /// `cp.async.{4,8,16}`, `cp.async.commit` and `cp.async.wait` in thread `th`.
    fn cp_async(
        &mut self,
        op: Intrinsic,
        args: &[kir::Arg],
        th: usize,
        mem: &HashMap<String, Vec<f64>>,
    ) {
        match op {
            Intrinsic::CpAsyncCommit => {
                let open = std::mem::take(&mut self.copies[th].open);
                self.copies[th].groups.push_back(open);
            }
            Intrinsic::CpAsyncWait => {
                let Some(kir::Arg::Expr(Expr::Int(n))) = args.first() else {
                    panic!("cp.async.wait takes an integer literal");
                };
                while self.copies[th].groups.len() > *n as usize {
                    let group = self.copies[th].groups.pop_front().unwrap_or_default();
                    for (key, off, x) in group {
                        let k = (key.clone(), off);
                        let left = self.pending[&k] - 1;
                        if left == 0 {
                            self.pending.remove(&k);
                        } else {
                            self.pending.insert(k, left);
                        }
                        self.shared.get_mut(&key).expect("shared")[off] = x;
                    }
                }
            }
            _ => {
                let bytes = op.cp_async_bytes().expect("a cp.async copy") as i64;
                let (dst, src) = (
                    args[0].frag().expect("cp.async dst"),
                    args[1].frag().expect("cp.async src"),
                );
                let Some(kir::Arg::Expr(size)) = args.get(2) else {
                    panic!("cp.async takes a source size");
                };
                let size = self.eval(size, th, mem).i();
                let dc = self.coords(&dst.at, th, mem);
                let sc = self.coords(&src.at, th, mem);
                let (d0, s0) = (self.offset(&dst.tensor, &dc), self.offset(&src.tensor, &sc));
                let (dp, sp) = (&self.places[&dst.tensor], &self.places[&src.tensor]);
                let elem = dp.dtype.size_bytes() as i64;
                let (dkey, skey, dtype) = (dp.key.clone(), sp.key.clone(), dp.dtype);
                for j in 0..bytes / elem {
                    let x = if j * elem < size {
                        round(dtype, mem[&skey][(s0 + j) as usize])
                    } else {
                        0.0
                    };
                    let off = (d0 + j) as usize;
                    self.not_pending(&dkey, off, "starts a second cp.async into");
                    *self.pending.entry((dkey.clone(), off)).or_default() += 1;
                    self.copies[th].open.push((dkey.clone(), off, x));
                }
            }
        }
    }

    fn coords(&self, es: &[Expr], th: usize, mem: &HashMap<String, Vec<f64>>) -> Vec<i64> {
        es.iter().map(|e| self.eval(e, th, mem).i()).collect()
    }

    fn eval(&self, e: &Expr, th: usize, mem: &HashMap<String, Vec<f64>>) -> Val {
        match e {
            Expr::Int(i) => Val::I(*i),
            Expr::Float(x) => Val::F(*x),
            Expr::Var(v) => *self.vars[th]
                .get(v)
                .unwrap_or_else(|| panic!("%{v} undefined in thread {th}")),
            Expr::Builtin(b) => Val::I(match b {
                Builtin::TidX => th as i64,
                Builtin::BidX => self.bid[0].into(),
                Builtin::BidY => self.bid[1].into(),
                Builtin::BidZ => self.bid[2].into(),
                Builtin::NtidX => self.k.block[0].into(),
                Builtin::NctaidX => self.k.grid[0].into(),
                Builtin::NctaidY => self.k.grid[1].into(),
                Builtin::NctaidZ => self.k.grid[2].into(),
            }),
            Expr::Load { tensor, coord } => {
                let c = self.coords(coord, th, mem);
                Val::F(self.read(tensor, &c, th, mem))
            }
            Expr::Idx(op, a, b) => {
                let (a, b) = (self.eval(a, th, mem).i(), self.eval(b, th, mem).i());
                Val::I(match op {
                    IdxOp::Add => a + b,
                    IdxOp::Sub => a - b,
                    IdxOp::Mul => a * b,
                    IdxOp::Div => a / b,
                    IdxOp::Rem => a % b,
                    IdxOp::Lt => i64::from(a < b),
                    IdxOp::Le => i64::from(a <= b),
                    IdxOp::Eq => i64::from(a == b),
                    IdxOp::And => i64::from(a != 0 && b != 0),
                    IdxOp::Xor => a ^ b,
                })
            }
            Expr::Call(f, args) => {
                let a: Vec<f64> = args.iter().map(|x| self.eval(x, th, mem).f()).collect();
                Val::F(call(*f, &a))
            }
        }
    }

    fn stmts(&mut self, body: &[Stmt], mask: &[bool], mem: &mut HashMap<String, Vec<f64>>) {
        if !mask.iter().any(|&m| m) {
            return;
        }
        for s in body {
            self.stmt(s, mask, mem);
        }
    }

    /// `var = value` in each thread of `mask`, a float rounded to the variable's float type.
    fn set(&mut self, var: &str, value: &Expr, mask: &[bool], mem: &mut HashMap<String, Vec<f64>>) {
        let d = self.types.get(var).copied().filter(|d| d.is_float());
        for th in self.each(mask) {
            let mut v = self.eval(value, th, mem);
            if let (Some(d), Val::F(x)) = (d, v) {
                v = Val::F(round(d, x));
            }
            self.vars[th].insert(var.to_string(), v);
        }
    }

    fn each(&self, mask: &[bool]) -> Vec<usize> {
        (0..mask.len()).filter(|&t| mask[t]).collect()
    }

    fn stmt(&mut self, s: &Stmt, mask: &[bool], mem: &mut HashMap<String, Vec<f64>>) {
        match s {
            // A scalar of an element type holds a value of that type, as on the GPU: a value
            // kept in f64 here and rounded where it is stored would differ from itself (a
            // softmax's max of exp(22.25) against the row's cached copy of it).
            Stmt::Let {
                var,
                value: init,
                ty,
            }
            | Stmt::Var { var, init, ty } => {
                match ty {
                    kir::Ty::Elem(d) => self.types.insert(var.clone(), *d),
                    _ => self.types.remove(var),
                };
                self.set(var, init, mask, mem);
            }
            Stmt::Assign { var, value } => self.set(var, value, mask, mem),
            Stmt::Store {
                tensor,
                coord,
                value,
            } => {
                for th in self.each(mask) {
                    let c = self.coords(coord, th, mem);
                    let x = self.eval(value, th, mem).f();
                    self.write(tensor, &c, th, x, mem);
                }
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
                ..
            } => {
                let mut live = mask.to_vec();
                for th in self.each(mask) {
                    let v = self.eval(start, th, mem);
                    self.vars[th].insert(var.clone(), v);
                }
                loop {
                    for th in self.each(&live.clone()) {
                        let i = self.vars[th][var].i();
                        live[th] = i < self.eval(end, th, mem).i();
                    }
                    if !live.iter().any(|&x| x) {
                        break;
                    }
                    self.stmts(body, &live, mem);
                    for th in self.each(&live) {
                        let i = self.vars[th][var].i() + self.eval(step, th, mem).i();
                        self.vars[th].insert(var.clone(), Val::I(i));
                    }
                }
            }
            Stmt::If { cond, body, orelse } => {
                let mut yes = vec![false; mask.len()];
                let mut no = vec![false; mask.len()];
                for th in self.each(mask) {
                    let c = self.eval(cond, th, mem).f() != 0.0;
                    yes[th] = c;
                    no[th] = !c;
                }
                self.stmts(body, &yes, mem);
                self.stmts(orelse, &no, mem);
            }
            Stmt::Copy {
                width, dst, src, ..
            } => {
                for th in self.each(mask) {
                    for e in 0..i64::from(*width) {
                        let mut sc = vec![e];
                        sc.extend(self.coords(&src.at, th, mem));
                        let mut dc = vec![e];
                        dc.extend(self.coords(&dst.at, th, mem));
                        let x = self.read(&src.tensor, &sc, th, mem);
                        self.write(&dst.tensor, &dc, th, x, mem);
                    }
                }
            }
            Stmt::Sync => {}
            Stmt::BlockReduce { var, op, value, .. } => {
                let ths = self.each(mask);
                assert_eq!(ths.len(), mask.len(), "block_reduce with inactive threads");
                let vals: Vec<f64> = ths.iter().map(|&t| self.eval(value, t, mem).f()).collect();
                let r = reduce(*op, &vals);
                for th in ths {
                    self.vars[th].insert(var.clone(), Val::F(r));
                }
            }
            Stmt::WarpReduce {
                var,
                op,
                width,
                value,
                ..
            } => {
                let w = *width as usize;
                let warps = self.warps(mask, "warp_reduce");
                let vals: Vec<f64> = (0..mask.len())
                    .map(|t| {
                        if mask[t] {
                            self.eval(value, t, mem).f()
                        } else {
                            0.0
                        }
                    })
                    .collect();
                for th in warps.iter().flat_map(|&w0| w0..w0 + 32) {
                    let g = th / w * w;
                    let r = reduce(*op, &vals[g..g + w]);
                    self.vars[th].insert(var.clone(), Val::F(r));
                }
            }
            Stmt::Intrinsic { op, args }
                if op.cp_async_bytes().is_some()
                    || matches!(op, Intrinsic::CpAsyncCommit | Intrinsic::CpAsyncWait) =>
            {
                for th in self.each(mask) {
                    self.cp_async(*op, args, th, mem);
                }
            }
            // Blocks run one after another, so an atomic is a read and a write.
            Stmt::Intrinsic {
                op: Intrinsic::AtomicArrive,
                args,
            } => {
                let (Some(kir::Arg::Frag(c)), Some(kir::Arg::Expr(v)), Some(kir::Arg::Frag(o))) =
                    (args.first(), args.get(1), args.get(2))
                else {
                    panic!("atom.arrive takes a counter, a value and a shared element");
                };
                for th in self.each(mask) {
                    let at = self.coords(&c.at, th, mem);
                    let old = self.read(&c.tensor, &at, th, mem);
                    let add = self.eval(v, th, mem).f();
                    self.write(&c.tensor, &at, th, old + add, mem);
                    let oat = self.coords(&o.at, th, mem);
                    self.write(&o.tensor, &oat, th, old, mem);
                }
            }
            Stmt::Intrinsic {
                op: Intrinsic::FenceGpu,
                ..
            } => {}
            // Every block has run up to this phase (`phases`): the count is final.
            Stmt::Intrinsic {
                op: Intrinsic::CounterWait,
                args,
            } => {
                let (Some(kir::Arg::Frag(c)), Some(kir::Arg::Expr(v))) =
                    (args.first(), args.get(1))
                else {
                    panic!("counter.wait takes a counter and a value");
                };
                for th in self.each(mask) {
                    let at = self.coords(&c.at, th, mem);
                    let have = self.read(&c.tensor, &at, th, mem);
                    let want = self.eval(v, th, mem).f();
                    // Exactly: fewer spin forever, more mean the count or the reset is wrong.
                    assert!(
                        have == want,
                        "counter.wait on %{}{at:?} for {want} arrivals finds {have}",
                        c.tensor
                    );
                }
            }
            Stmt::Intrinsic { op, args } => {
                for w0 in self.warps(mask, op.name()) {
                    self.intrinsic(*op, args, w0, mem);
                }
            }
        }
    }

    /// The first lanes of the warps with an active lane; a warp-wide statement needs all 32.
    fn warps(&self, mask: &[bool], what: &str) -> Vec<usize> {
        (0..mask.len() / 32)
            .map(|w| w * 32)
            .filter(|&w0| {
                let active = mask[w0..w0 + 32].iter().filter(|&&m| m).count();
                assert!(
                    active == 0 || active == 32,
                    "{what} with {active} of 32 lanes active"
                );
                active == 32
            })
            .collect()
    }

    fn frag_coord(
        &self,
        a: &kir::Arg,
        v: i64,
        th: usize,
        mem: &HashMap<String, Vec<f64>>,
    ) -> (String, Vec<i64>) {
        let f = a.frag().expect("fragment");
        let mut c = vec![v];
        c.extend(self.coords(&f.at, th, mem));
        (f.tensor.clone(), c)
    }

    /// `d = c + a·b` of one warp's `16 x K` and `K x 8` operands (f32 sums, one product at a
    /// time), written to the fragment `d` in the order of the `mma_m16n8k16_c` atom.
    fn mma_write<const K: usize>(
        &mut self,
        d: &kir::Arg,
        (a, b, c): (&[[f64; K]; 16], &[[f64; 8]; K], &[[f64; 8]; 16]),
        lane0: usize,
        mem: &mut HashMap<String, Vec<f64>>,
    ) {
        for t in 0..32usize {
            for v in 0..4 {
                let (r, col) = self.atoms[2][t * 4 + v];
                let (r, col) = (r as usize, col as usize);
                let mut acc = c[r][col] as f32;
                for (k, row) in b.iter().enumerate() {
                    acc += (a[r][k] * row[col]) as f32;
                }
                let (tn, co) = self.frag_coord(d, v as i64, lane0 + t, mem);
                self.write(&tn, &co, lane0 + t, f64::from(acc), mem);
            }
        }
    }

    fn intrinsic(
        &mut self,
        op: Intrinsic,
        args: &[kir::Arg],
        lane0: usize,
        mem: &mut HashMap<String, Vec<f64>>,
    ) {
        match op {
            Intrinsic::LdmatrixX4 | Intrinsic::LdmatrixX4Trans => {
                let src = args[1].frag().expect("ldmatrix source");
                let starts: Vec<i64> = (0..32)
                    .map(|l| {
                        let c = self.coords(&src.at, lane0 + l, mem);
                        self.offset(&src.tensor, &c)
                    })
                    .collect();
                let key = self.places[&src.tensor].key.clone();
                for t in 0..32usize {
                    for v in 0..8usize {
                        let j = v / 2;
                        let at = if op == Intrinsic::LdmatrixX4Trans {
                            starts[8 * j + 2 * (t % 4) + v % 2] + (t / 4) as i64
                        } else {
                            starts[8 * j + t / 4] + (2 * (t % 4) + v % 2) as i64
                        };
                        let (dt, dc) = self.frag_coord(&args[0], v as i64, lane0 + t, mem);
                        let x = self.shared_at(&key, at as usize);
                        self.write(&dt, &dc, lane0 + t, x, mem);
                    }
                }
            }
            Intrinsic::MmaM16n8k16 => {
                let mut a = [[0.0f64; 16]; 16];
                let mut b = [[0.0f64; 8]; 16];
                let mut c = [[0.0f64; 8]; 16];
                for t in 0..32usize {
                    let th = lane0 + t;
                    for v in 0..8 {
                        let (tn, co) = self.frag_coord(&args[1], v as i64, th, mem);
                        let (r, k) = self.atoms[0][t * 8 + v];
                        a[r as usize][k as usize] = self.read(&tn, &co, th, mem);
                    }
                    for v in 0..4 {
                        let (tn, co) = self.frag_coord(&args[2], v as i64, th, mem);
                        let (n, k) = self.atoms[1][t * 4 + v];
                        b[k as usize][n as usize] = self.read(&tn, &co, th, mem);
                        let (tn, co) = self.frag_coord(&args[0], v as i64, th, mem);
                        let (r, col) = self.atoms[2][t * 4 + v];
                        c[r as usize][col as usize] = self.read(&tn, &co, th, mem);
                    }
                }
                self.mma_write(&args[0], (&a, &b, &c), lane0, mem);
            }
            Intrinsic::MmaM16n8k8Tf32 => {
                // Operands as the hardware reads them: the TF32 bits of each f32.
                let tf32 = |x: f64| f64::from(f32::from_bits((x as f32).to_bits() & 0xffff_e000));
                let mut a = [[0.0f64; 8]; 16];
                let mut b = [[0.0f64; 8]; 8];
                let mut c = [[0.0f64; 8]; 16];
                for t in 0..32usize {
                    let th = lane0 + t;
                    for v in 0..4 {
                        let (tn, co) = self.frag_coord(&args[1], v as i64, th, mem);
                        let (r, k) = self.atoms[3][t * 4 + v];
                        a[r as usize][k as usize] = tf32(self.read(&tn, &co, th, mem));
                        let (tn, co) = self.frag_coord(&args[0], v as i64, th, mem);
                        let (r, col) = self.atoms[2][t * 4 + v];
                        c[r as usize][col as usize] = self.read(&tn, &co, th, mem);
                    }
                    for v in 0..2 {
                        let (tn, co) = self.frag_coord(&args[2], v as i64, th, mem);
                        let (n, k) = self.atoms[4][t * 2 + v];
                        b[k as usize][n as usize] = tf32(self.read(&tn, &co, th, mem));
                    }
                }
                self.mma_write(&args[0], (&a, &b, &c), lane0, mem);
            }
            // The Hopper statements (TMA, mbarriers, wgmma) are warpgroup-level and asynchronous:
            // the emulator runs the sm_80 kernels the attention tests lower (no `wgmma`), and
            // so never meets `mul.x2`, which only the Hopper norm prologue issues.
            other => panic!("the emulator does not model `{}`", other.name()),
        }
    }
}
