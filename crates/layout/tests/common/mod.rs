//! Shared helpers of the layout tests: a seeded generator of random layouts that the algebra
//! admits (so both we and pycute can evaluate them), and their text.

#![allow(dead_code)]

/// SplitMix64: a tiny deterministic generator (no dependency, same sequence everywhere).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Options for [`layout`].
#[derive(Clone, Copy)]
pub struct Gen {
    /// Most leaves.
    pub leaves: u64,
    /// Allow sizes 3 and 6 (else powers of two only, which always divide one another).
    pub odd: bool,
    /// Allow stride-0 (broadcast) modes.
    pub zero: bool,
    /// Allow gaps between modes (strides past the compact ones).
    pub gaps: bool,
}

impl Gen {
    pub const POW2: Gen = Gen {
        leaves: 4,
        odd: false,
        zero: false,
        gaps: true,
    };
}

/// A random flat `(shape, stride)`: the compact strides of a random permutation of the modes,
/// with optional gaps (so the layout is injective and has a complement) and stride-0 modes.
pub fn flat(rng: &mut Rng, g: Gen) -> (Vec<i64>, Vec<i64>) {
    let n = 1 + rng.below(g.leaves) as usize;
    let sizes: &[i64] = if g.odd {
        &[1, 2, 3, 4, 6, 8]
    } else {
        &[1, 2, 4, 8]
    };
    let shape: Vec<i64> = (0..n).map(|_| rng.pick(sizes)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut stride = vec![0; n];
    let mut cur = 1;
    for &k in &order {
        if g.gaps && rng.chance(20) {
            cur *= rng.pick(&[2, 4]);
        }
        stride[k] = cur;
        cur *= shape[k];
    }
    for d in stride.iter_mut() {
        if g.zero && rng.chance(15) {
            *d = 0;
        }
    }
    (shape, stride)
}

/// `items` grouped into a random hierarchy (adjacent items nested), as text.
fn group(rng: &mut Rng, items: &[String], depth: u32) -> String {
    if items.len() == 1 && (depth > 0 || rng.chance(70)) {
        return items[0].clone();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let take = if depth < 2 && rng.chance(30) {
            1 + rng.below((items.len() - i) as u64) as usize
        } else {
            1
        };
        let chunk = &items[i..i + take];
        parts.push(if take > 1 {
            group(rng, chunk, depth + 1)
        } else {
            chunk[0].clone()
        });
        i += take;
    }
    if parts.len() == 1 && depth > 0 {
        parts.remove(0)
    } else {
        format!("({})", parts.join(","))
    }
}

/// A random layout in CuTe notation.
pub fn layout(rng: &mut Rng, g: Gen) -> String {
    let (shape, stride) = flat(rng, g);
    let pairs: Vec<String> = shape
        .iter()
        .zip(&stride)
        .map(|(s, d)| format!("{s}\u{0}{d}"))
        .collect();
    let nested = group(rng, &pairs, 0);
    split_pairs(&nested)
}

/// Turn a nested text of `s\0d` pairs into `shape:stride` with the same nesting.
fn split_pairs(nested: &str) -> String {
    let (mut shape, mut stride) = (String::new(), String::new());
    let mut in_stride = false;
    for c in nested.chars() {
        match c {
            '\u{0}' => in_stride = true,
            '(' | ')' | ',' => {
                in_stride = false;
                shape.push(c);
                stride.push(c);
            }
            _ if in_stride => stride.push(c),
            _ => shape.push(c),
        }
    }
    format!("{shape}:{stride}")
}
