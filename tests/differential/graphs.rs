//! The generator of `differential.rs`: random graph texts over every op of the graph IR,
//! drawn from one proptest word per graph and one byte per statement.

use std::fmt::Write as _;

/// The sizes a run draws from.
pub struct Sizes {
    /// Dims: 1s, primes, powers of two and one past them, where tiles, vectors and tails differ.
    pub dims: &'static [u64],
    /// The element budget of one value.
    pub max: u64,
    /// A matmul's N and an attention's key count.
    pub widths: &'static [u64],
    /// Attention head dims.
    pub heads: &'static [u64],
}

/// Small enough for the emulator to run quickly.
pub const SMALL: Sizes = Sizes {
    dims: &[1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 33, 64],
    max: 6144,
    widths: &[1, 8, 16, 17, 32, 64],
    heads: &[8, 16, 32, 64],
};

/// `IRC_DIFF_LARGE=1`: where the GPU templates change schedule (tiles of 64 and 128 with
/// tails, rows long enough to split, attention over hundreds of keys); lowered and emitted
/// here but not emulated (too slow on a CPU): dumped (`IRC_DIFF_DUMP`) to run on the GPU.
pub const LARGE: Sizes = Sizes {
    dims: &[1, 3, 8, 17, 64, 100, 128, 255, 256, 1024, 4097, 16384],
    max: 1 << 20,
    widths: &[1, 8, 64, 72, 128, 200, 256, 1000],
    heads: &[32, 64, 80, 128, 256],
};

/// Whether this run draws [`LARGE`] sizes.
pub fn large() -> bool {
    std::env::var_os("IRC_DIFF_LARGE").is_some_and(|v| v != "0")
}

pub const FLOATS: [&str; 4] = ["f32", "f16", "bf16", "f64"];
pub const SMOOTH: [&str; 9] = [
    "neg", "abs", "exp", "tanh", "sigmoid", "relu", "gelu", "silu", "erf",
];
pub const PERIODIC: [&str; 2] = ["sin", "cos"];
/// Ops defined on part of the line only: applied to `|x| + 0.5`.
pub const POSITIVE: [&str; 4] = ["log", "sqrt", "rsqrt", "recip"];
/// Discontinuous ops: applied only to values both sides compute exactly.
pub const STEPS: [&str; 3] = ["floor", "ceil", "round"];
pub const BINARY: [&str; 5] = ["add", "sub", "mul", "max", "min"];
pub const COMPARE: [&str; 6] = ["eq", "ne", "lt", "le", "gt", "ge"];

/// A deterministic stream of choices from one proptest word (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub(crate) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    pub(crate) fn coin(&mut self) -> bool {
        self.next() % 2 == 0
    }

    /// Axis `a` of a rank-`rank` value as a graph writes it: counted from the end half of the
    /// time.
    pub(crate) fn written_axis(&mut self, a: usize, rank: usize) -> i64 {
        a as i64 - if self.coin() { rank as i64 } else { 0 }
    }
}

#[derive(Clone)]
pub struct Val {
    pub name: String,
    pub shape: Vec<u64>,
    pub dt: &'static str,
    /// Computed by exact operations only (parameters, views, copies, iota, integer math), so
    /// the kernels and the interpreter agree bit for bit and a discontinuous op may read it.
    pub exact: bool,
}

pub fn ty(shape: &[u64], dt: &str) -> String {
    let mut s = String::from("tensor<");
    for d in shape {
        let _ = write!(s, "{d}x");
    }
    format!("{s}{dt}>")
}

pub fn numel(shape: &[u64]) -> u64 {
    shape.iter().product()
}

pub fn list(xs: impl IntoIterator<Item = i64>) -> String {
    let v: Vec<String> = xs.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// A graph under construction: parameters, statements and the values they define.
pub struct Graph {
    pub sizes: &'static Sizes,
    pub params: Vec<Val>,
    pub body: String,
    pub vals: Vec<Val>,
    pub count: usize,
}

impl Graph {
    pub(crate) fn param(&mut self, shape: Vec<u64>, dt: &'static str) -> Val {
        let v = Val {
            name: format!("p{}", self.params.len()),
            shape,
            dt,
            exact: true,
        };
        self.params.push(v.clone());
        self.vals.push(v.clone());
        v
    }

    /// Appends `%vN = line` with the given result; returns it.
    pub(crate) fn stmt(
        &mut self,
        line: String,
        shape: Vec<u64>,
        dt: &'static str,
        exact: bool,
    ) -> Val {
        let name = format!("v{}", self.count);
        self.count += 1;
        let _ = writeln!(self.body, "  %{name} = {line}");
        let v = Val {
            name,
            shape,
            dt,
            exact,
        };
        self.vals.push(v.clone());
        v
    }

    pub(crate) fn splat(&mut self, value: &str, shape: &[u64], dt: &'static str) -> Val {
        self.stmt(
            format!("constant {{value = {value}}} : {}", ty(shape, dt)),
            shape.to_vec(),
            dt,
            true,
        )
    }

    /// `|x| + 0.5`: a value every partial op accepts.
    pub(crate) fn positive(&mut self, x: &Val) -> Val {
        let a = self.stmt(format!("abs %{}", x.name), x.shape.clone(), x.dt, x.exact);
        let h = self.splat("0.5", &[], x.dt);
        self.stmt(
            format!("add %{}, %{}", a.name, h.name),
            x.shape.clone(),
            x.dt,
            false,
        )
    }

    /// A value of `x`'s dtype whose shape broadcasts to `x`'s: an earlier one, or a new
    /// parameter with some dims 1 and some leading dims dropped.
    pub(crate) fn partner(&mut self, r: &mut Rng, x: &Val) -> Val {
        let fits = |v: &Val| {
            v.dt == x.dt
                && v.shape.len() <= x.shape.len()
                && v.shape
                    .iter()
                    .rev()
                    .zip(x.shape.iter().rev())
                    .all(|(&a, &b)| a == b || a == 1)
        };
        let earlier: Vec<Val> = self.vals.iter().filter(|v| fits(v)).cloned().collect();
        if !earlier.is_empty() && r.coin() {
            return r.pick(&earlier).clone();
        }
        let drop = r.below(x.shape.len() + 1).min(x.shape.len());
        let shape = x.shape[drop..]
            .iter()
            .map(|&d| if r.below(3) == 0 { 1 } else { d })
            .collect();
        self.param(shape, x.dt)
    }

    /// An operand: most often one of the last few values (chains grow deep), rarely a scalar
    /// (the splats written for `positive` and masks).
    pub(crate) fn operand(&mut self, r: &mut Rng) -> Val {
        for _ in 0..4 {
            let n = self.vals.len();
            let v = if r.coin() {
                &self.vals[n - 1 - r.below(n.min(4))]
            } else {
                r.pick(&self.vals)
            };
            if !v.shape.is_empty() || r.below(4) == 0 {
                return v.clone();
            }
        }
        self.vals[0].clone()
    }

    /// One random statement (or a few) reading earlier values.
    pub(crate) fn step(&mut self, kind: u8, r: &mut Rng) {
        let x = self.operand(r);
        let rank = x.shape.len();
        let float = FLOATS.contains(&x.dt);
        match kind % 16 {
            0 if float => {
                let op = *r.pick(&SMOOTH);
                self.stmt(format!("{op} %{}", x.name), x.shape.clone(), x.dt, false);
            }
            1 if float => {
                let op = *r.pick(&POSITIVE);
                let p = self.positive(&x);
                self.stmt(format!("{op} %{}", p.name), x.shape.clone(), x.dt, false);
            }
            2 if float && x.exact => {
                let op = if r.coin() {
                    *r.pick(&STEPS)
                } else {
                    *r.pick(&PERIODIC)
                };
                self.stmt(format!("{op} %{}", x.name), x.shape.clone(), x.dt, false);
            }
            3 if x.dt != "i1" => {
                // A binary op with numpy broadcasting, either operand first.
                let y = self.partner(r, &x);
                let op = if float {
                    *r.pick(&["add", "sub", "mul", "max", "min", "div", "pow"])
                } else {
                    *r.pick(&BINARY)
                };
                let (a, b) = if op == "div" || op == "pow" {
                    let b = self.positive(&y);
                    (x.clone(), b)
                } else if r.coin() {
                    (y.clone(), x.clone())
                } else {
                    (x.clone(), y.clone())
                };
                let (a, b) = if op == "pow" {
                    // A base ≥ 0.5 raised to a power in (-1, 1): no overflow.
                    let base = self.positive(&x);
                    let e = self.stmt(format!("tanh %{}", y.name), y.shape.clone(), y.dt, false);
                    (base, e)
                } else {
                    (a, b)
                };
                let exact = x.exact && y.exact && matches!(op, "max" | "min") || !float;
                self.stmt(
                    format!("{op} %{}, %{}", a.name, b.name),
                    x.shape.clone(),
                    x.dt,
                    exact,
                );
            }
            4 if x.exact => {
                // select(x cmp y, x, z): a comparison of exact values picks between two values.
                let y = self.partner(r, &x);
                let op = *r.pick(&COMPARE);
                let c = self.stmt(
                    format!("{op} %{}, %{}", x.name, y.name),
                    x.shape.clone(),
                    "i1",
                    true,
                );
                let z = self.partner(r, &x);
                let (a, b) = if r.coin() { (&x, &z) } else { (&z, &x) };
                let exact = a.exact && b.exact;
                self.stmt(
                    format!("select %{}, %{}, %{}", c.name, a.name, b.name),
                    x.shape.clone(),
                    x.dt,
                    exact,
                );
            }
            5 if rank >= 1 && x.dt != "i1" => {
                // A reduction over one or more axes (or all), keeping them or not.
                let mut axes: Vec<i64> = (0..rank as i64).filter(|_| r.coin()).collect();
                if axes.is_empty() {
                    axes.push(r.below(rank) as i64);
                }
                let keep = r.coin();
                let ops: &[&str] = if float {
                    &["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"]
                } else {
                    &["reduce_sum", "reduce_max", "reduce_min"]
                };
                let op = *r.pick(ops);
                let shape: Vec<u64> = (0..rank)
                    .filter_map(|i| match (axes.contains(&(i as i64)), keep) {
                        (false, _) => Some(x.shape[i]),
                        (true, true) => Some(1),
                        (true, false) => None,
                    })
                    .collect();
                let all = axes.len() == rank && r.coin();
                let written: Vec<i64> = axes
                    .iter()
                    .map(|&a| r.written_axis(a as usize, rank))
                    .collect();
                let attrs = if all {
                    format!("{{keepdims = {keep}}}")
                } else {
                    format!("{{axes = {}, keepdims = {keep}}}", list(written))
                };
                let exact = !float || matches!(op, "reduce_max" | "reduce_min") && x.exact;
                self.stmt(format!("{op} %{} {attrs}", x.name), shape, x.dt, exact);
            }
            6 if float && rank >= 1 => {
                // A composite along any axis, with its weights.
                let axis = r.below(rank);
                let n = x.shape[axis];
                let written = r.written_axis(axis, rank);
                let line = match r.below(4) {
                    0 => format!("softmax %{} {{axis = {written}}}", x.name),
                    1 => format!("log_softmax %{} {{axis = {written}}}", x.name),
                    2 => {
                        let w = self.param(vec![n], x.dt);
                        format!("rmsnorm %{}, %{} {{axis = {written}}}", x.name, w.name)
                    }
                    _ => {
                        let w = self.param(vec![n], x.dt);
                        let b = self.param(vec![n], x.dt);
                        format!(
                            "layernorm %{}, %{}, %{} {{axis = {written}, eps = 0.001}}",
                            x.name, w.name, b.name
                        )
                    }
                };
                self.stmt(line, x.shape.clone(), x.dt, false);
            }
            7 if float && rank >= 1 => self.matmul(r, &x),
            8 if rank >= 2 => {
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, r.below(i + 1));
                }
                let shape = perm.iter().map(|&p| x.shape[p as usize]).collect();
                let written = perm.iter().map(|&p| r.written_axis(p as usize, rank));
                self.stmt(
                    format!("transpose %{} {{perm = {}}}", x.name, list(written)),
                    shape,
                    x.dt,
                    x.exact,
                );
            }
            9 if rank >= 1 => self.reshape(r, &x),
            10 if rank <= 3 && numel(&x.shape) * 3 <= self.sizes.max => {
                // A broadcast: a new leading dim, and each 1 stretched or kept.
                let lead = *r.pick(&[2u64, 3]);
                let shape: Vec<u64> = std::iter::once(lead)
                    .chain(
                        x.shape
                            .iter()
                            .map(|&d| if d == 1 { *r.pick(&[1, 3]) } else { d }),
                    )
                    .collect();
                // -1 keeps an input dim (`shape` aligns the input at the right).
                let keep = r.coin();
                let written = shape.iter().enumerate().map(|(i, &d)| {
                    let kept = i > 0 && x.shape[i - 1] == d;
                    if keep && kept { -1 } else { d as i64 }
                });
                self.stmt(
                    format!("broadcast %{} {{shape = {}}}", x.name, list(written)),
                    shape,
                    x.dt,
                    x.exact,
                );
            }
            11 if rank >= 1 => self.slice(r, &x),
            12 if rank >= 1 => {
                // concat along an axis with one or two values that agree elsewhere.
                let axis = r.below(rank);
                let mut names = vec![x.name.clone()];
                let mut shape = x.shape.clone();
                for _ in 0..r.below(3) {
                    let mut s = x.shape.clone();
                    s[axis] = *r.pick(&[1u64, 2, 3, 8]);
                    if numel(&shape) + numel(&s) > self.sizes.max {
                        break;
                    }
                    let other = if r.coin() {
                        x.clone()
                    } else {
                        self.param(s, x.dt)
                    };
                    shape[axis] += other.shape[axis];
                    names.push(other.name);
                }
                let operands: Vec<String> = names.iter().map(|n| format!("%{n}")).collect();
                let written = r.written_axis(axis, rank);
                self.stmt(
                    format!("concat {} {{axis = {written}}}", operands.join(", ")),
                    shape,
                    x.dt,
                    x.exact,
                );
            }
            13 if rank >= 1 => {
                // gather with known indices in [-n, n), of rank 0 to 2.
                let axis = r.below(rank);
                let n = x.shape[axis] as i64;
                let ishape: Vec<u64> = (0..r.below(3)).map(|_| *r.pick(&[1u64, 2, 3, 5])).collect();
                let values: Vec<i64> = (0..numel(&ishape))
                    .map(|_| r.below(2 * n as usize) as i64 - n)
                    .collect();
                let idt = *r.pick(&["i32", "i64"]);
                let value = if ishape.is_empty() {
                    values[0].to_string()
                } else {
                    list(values)
                };
                let i = self.stmt(
                    format!("constant {{value = {value}}} : {}", ty(&ishape, idt)),
                    ishape.clone(),
                    idt,
                    true,
                );
                let shape: Vec<u64> = x.shape[..axis]
                    .iter()
                    .chain(&ishape)
                    .chain(&x.shape[axis + 1..])
                    .copied()
                    .collect();
                if numel(&shape) <= self.sizes.max {
                    self.stmt(
                        format!("gather %{}, %{} {{axis = {axis}}}", x.name, i.name),
                        shape,
                        x.dt,
                        x.exact,
                    );
                }
            }
            14 => {
                // A cast to another float dtype, or to an integer and back (of exact values).
                if float && (!x.exact || r.coin()) {
                    let dt = *r.pick(&FLOATS);
                    self.stmt(
                        format!("cast %{} {{dtype = {dt}}}", x.name),
                        x.shape.clone(),
                        dt,
                        x.exact,
                    );
                } else if x.exact {
                    let dt = *r.pick(&["i32", "i64", "f32", "f16"]);
                    self.stmt(
                        format!("cast %{} {{dtype = {dt}}}", x.name),
                        x.shape.clone(),
                        dt,
                        true,
                    );
                }
            }
            15 if rank >= 1 && x.dt != "i1" => {
                // iota along an axis, added to x (a position bias), or an attention chain.
                if float && r.coin() {
                    // On x, or on new heads [B, H, S, D] of a head dim the templates take.
                    let q = if rank >= 2 && r.coin() {
                        x.clone()
                    } else {
                        let s = *r.pick(self.sizes.widths);
                        let d = *r.pick(self.sizes.heads);
                        let shape = vec![1 + r.below(2) as u64, *r.pick(&[1, 2, 4]), s, d];
                        if numel(&shape) > self.sizes.max {
                            return;
                        }
                        self.param(shape, x.dt)
                    };
                    self.attention(r, &q);
                    return;
                }
                let axis = r.below(rank);
                let axis = r.written_axis(axis, rank);
                let i = self.stmt(
                    format!("iota {{axis = {axis}}} : {}", ty(&x.shape, x.dt)),
                    x.shape.clone(),
                    x.dt,
                    true,
                );
                self.stmt(
                    format!("add %{}, %{}", x.name, i.name),
                    x.shape.clone(),
                    x.dt,
                    !float,
                );
            }
            _ => {
                if float {
                    self.stmt(format!("tanh %{}", x.name), x.shape.clone(), x.dt, false);
                } else if x.dt != "i1" {
                    self.stmt(format!("neg %{}", x.name), x.shape.clone(), x.dt, true);
                }
            }
        }
    }

    /// The graph's text: results are the last value and up to two others.
    pub(crate) fn text(&self, r: &mut Rng) -> String {
        let last = self.vals.last().expect("a value");
        let mut results = vec![last.clone()];
        for _ in 0..r.below(3) {
            let v = r.pick(&self.vals).clone();
            if results.iter().all(|x| x.name != v.name) {
                results.push(v);
            }
        }
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("%{}: {}", p.name, ty(&p.shape, p.dt)))
            .collect();
        let tys: Vec<String> = results.iter().map(|v| ty(&v.shape, v.dt)).collect();
        let names: Vec<String> = results.iter().map(|v| format!("%{}", v.name)).collect();
        format!(
            "graph @diff({}) -> ({}) {{\n{}  return {}\n}}\n",
            params.join(", "),
            tys.join(", "),
            self.body,
            names.join(", ")
        )
    }
}

/// The graph text of one case: a first parameter, then `steps`.
pub fn build(seed: u64, steps: &[u8]) -> String {
    let mut r = Rng(seed);
    let sizes = if large() { &LARGE } else { &SMALL };
    let mut g = Graph {
        sizes,
        params: vec![],
        body: String::new(),
        vals: vec![],
        count: 0,
    };
    let rank = 1 + r.below(4);
    let mut shape = vec![];
    for _ in 0..rank {
        let d = *r.pick(sizes.dims);
        if numel(&shape) * d <= sizes.max / 4 {
            shape.push(d);
        }
    }
    if shape.is_empty() || r.below(16) == 0 {
        // A rank-0 parameter now and then; else at least one dim.
        shape.truncate(0);
        if r.coin() {
            shape.push(*r.pick(sizes.dims));
        }
    }
    let dt = if r.below(8) == 0 {
        "i32"
    } else {
        *r.pick(&FLOATS)
    };
    g.param(shape, dt);
    for &k in steps {
        g.step(k, &mut r);
    }
    g.text(&mut r)
}
