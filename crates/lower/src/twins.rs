//! Lowering identical groups once.
//!
//! A deep model repeats itself: the 2000 layers of a transformer plan to thousands of groups
//! that differ only in the names of their values and buffers. A group's kernels are a function
//! of its [`key`] — the group with value and buffer names and source locations left out: each
//! statement (op, attributes with floats to the bit, result type, operands by position), each
//! buffer numbered by first use with its kind and type, and which buffer each store writes —
//! plus what is the same for every group of a module (the lowering options and the index
//! width). So [`Lowering::run`] lowers the first group of each key (its *representative*) and
//! gives every other group a copy of the representative's kernels, renamed:
//!
//! - kernel, temp-buffer and constant names start with the group's name (`@g`, `@g_partial`,
//!   `%g_tma0`, `@g_c0`): the representative's prefix becomes the group's (a copy's constants
//!   are then merged into its representative's, below);
//! - a launch argument or tensor map naming one of the representative's buffers names the
//!   group's buffer at the same position;
//! - each origin (a kernel's `from:` line) is the group's own statement at the position of the
//!   representative's.
//!
//! Where a name cannot be mapped that way the group is lowered on its own. Equal constant arrays
//! of the module are then merged into one (a copy's tables are its representative's), so a
//! copied kernel is its representative's kernel but for its name and origins: it is reported as
//! a twin ([`crate::Planned::twins`]), which the kernel IR verifier
//! ([`irc_kir::verify_module_with_twins`]) and the CUDA emitter (`irc_emit_cuda::emit_with_twins`)
//! use to check and write the shared body once.

use crate::lower::{Lowered, Lowering, R};
use irc_fused::{Buffer, Group, Stmt};
use irc_ir::{ValueDef, ValueId};
use irc_kir as kir;
use std::collections::HashMap;
use std::fmt::Write;

/// A representative's kernels, and where their origins come from ([`Lowering::rename`]).
type Rep = (Lowered, HashMap<String, usize>);

/// The group with names and locations left out (module docs).
pub(crate) fn key<'g>(g: &'g Group, buffers: &HashMap<&str, &Buffer>) -> String {
    let mut values: HashMap<&'g str, usize> = HashMap::new();
    let mut ids: HashMap<&'g str, usize> = HashMap::new();
    let mut out = String::new();
    let mut buffer = |out: &mut String, b: &'g str| {
        let n = ids.len();
        let id = *ids.entry(b).or_insert(n);
        if id == n {
            match buffers.get(b) {
                Some(d) => {
                    let _ = write!(out, "[b{id} {} {}]", d.kind.name(), d.ty);
                }
                None => {
                    let _ = write!(out, "[b{id} ?]");
                }
            }
        }
        id
    };
    let pos = |values: &HashMap<&str, usize>, v: &str| -> String {
        values.get(v).map_or("?".into(), |i| format!("%{i}"))
    };
    for s in &g.stmts {
        match s {
            Stmt::Load { value, buffer: b } => {
                let id = buffer(&mut out, b);
                let _ = writeln!(out, "%{} = load b{id}", values.len());
                values.insert(value, values.len());
            }
            Stmt::Op(o) => {
                let operands: Vec<String> = o.operands.iter().map(|a| pos(&values, a)).collect();
                let _ = writeln!(
                    out,
                    "%{} = {} {} {:?} : {}",
                    values.len(),
                    o.op.name(),
                    operands.join(", "),
                    o.attrs,
                    o.ty
                );
                values.insert(&o.value, values.len());
            }
            Stmt::Store { value, buffer: b } => {
                let id = buffer(&mut out, b);
                let _ = writeln!(out, "store {} -> b{id}", pos(&values, value));
            }
        }
    }
    out
}

/// The values a group defines (loads and ops), in order.
fn defined(g: &Group) -> impl Iterator<Item = &str> {
    g.stmts.iter().filter_map(|s| match s {
        Stmt::Load { value, .. } => Some(value.as_str()),
        Stmt::Op(o) => Some(o.value.as_str()),
        Stmt::Store { .. } => None,
    })
}

/// The buffers a group reads and writes, in order of first use.
fn buffers_of(g: &Group) -> Vec<&str> {
    let mut out: Vec<&str> = vec![];
    for s in &g.stmts {
        if let Stmt::Load { buffer, .. } | Stmt::Store { buffer, .. } = s
            && !out.contains(&buffer.as_str())
        {
            out.push(buffer);
        }
    }
    out
}

/// How the representative's names become a group's.
struct Rename<'a> {
    from: &'a str,
    to: &'a str,
    buffers: HashMap<&'a str, &'a str>,
    /// The representative's origin statement → the group's origin.
    origins: HashMap<String, kir::Origin>,
    temps: Vec<&'a str>,
}

impl Rename<'_> {
    fn prefixed(&self, name: &str) -> Option<String> {
        name.strip_prefix(self.from)
            .map(|rest| format!("{}{rest}", self.to))
    }

    fn buffer(&self, name: &str) -> Option<String> {
        if self.temps.contains(&name) {
            self.prefixed(name)
        } else {
            self.buffers.get(name).map(|b| b.to_string())
        }
    }

    fn kernel(&self, k: &kir::Kernel) -> Option<kir::Kernel> {
        let origins = k
            .origins
            .iter()
            .map(|o| self.origins.get(&o.op).cloned())
            .collect::<Option<Vec<_>>>()?;
        let mut tensors = k.tensors.clone();
        for t in &mut tensors {
            if let kir::Space::Const(c) = &mut t.space {
                *c = self.prefixed(c)?;
            }
        }
        Some(kir::Kernel {
            name: self.prefixed(&k.name)?,
            grid: k.grid,
            block: k.block,
            index: k.index,
            occupancy: k.occupancy,
            origins,
            params: k.params.clone(),
            tensors,
            body: k.body.clone(),
        })
    }
}

impl Lowering<'_> {
    /// The value named `name` and the origin of the statement defining it.
    fn origin_of(&self, name: &str) -> Option<kir::Origin> {
        let v: ValueId = *self.value_of.get(name)?;
        match self.g.values[v.index()].def {
            ValueDef::Inst(i) => Some(self.origin(&self.g.insts[i])),
            ValueDef::Param(_) => None,
        }
    }

    /// Where each origin of a representative's kernels comes from: the position of its
    /// statement among the values the group defines.
    fn origin_positions(&self, rep: &Group, done: &Lowered) -> HashMap<String, usize> {
        let wanted: std::collections::HashSet<&str> = done
            .kernels
            .iter()
            .flat_map(|(k, _, _)| k.origins.iter().map(|o| o.op.as_str()))
            .collect();
        defined(rep)
            .enumerate()
            .filter_map(|(p, v)| Some((self.origin_of(v)?.op, p)))
            .filter(|(op, _)| wanted.contains(op.as_str()))
            .collect()
    }

    /// Group `grp`'s kernels as a copy of `rep`'s (lowered to `done`, its origins at
    /// `positions`), or `None` where a name does not map (module docs).
    fn rename(&self, rep: &Group, (done, positions): &Rep, grp: &Group) -> Option<Lowered> {
        let (rb, gb) = (buffers_of(rep), buffers_of(grp));
        if rb.len() != gb.len() {
            return None;
        }
        let values: Vec<&str> = defined(grp).collect();
        let origins = positions
            .iter()
            .map(|(op, &p)| Some((op.clone(), self.origin_of(values.get(p)?)?)))
            .collect::<Option<HashMap<_, _>>>()?;
        let map = Rename {
            from: &rep.name,
            to: &grp.name,
            buffers: rb.into_iter().zip(gb).collect(),
            origins,
            temps: done.temps.iter().map(|t| t.name.as_str()).collect(),
        };
        let mut temps = done.temps.clone();
        for t in &mut temps {
            t.name = map.prefixed(&t.name)?;
            if let Some(tm) = &mut t.tensor_map {
                tm.of = map.buffer(&tm.of)?;
            }
        }
        let mut kernels = Vec::with_capacity(done.kernels.len());
        for (k, args, consts) in &done.kernels {
            let args = args
                .iter()
                .map(|a| map.buffer(a))
                .collect::<Option<Vec<_>>>()?;
            let consts = consts
                .iter()
                .map(|c| {
                    Some(kir::ConstDecl {
                        name: map.prefixed(&c.name)?,
                        dtype: c.dtype,
                        values: c.values.clone(),
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            kernels.push((map.kernel(k)?, args, consts));
        }
        let mut choice = done.choice.clone();
        choice.group = grp.name.clone();
        choice.kernels = kernels.iter().map(|(k, _, _)| k.name.clone()).collect();
        Some(Lowered {
            temps,
            kernels,
            choice,
            copied: true,
        })
    }

    /// Lowers every group: the representative of each [`key`] on its own (in parallel; a
    /// builder reads the lowering, never another group's kernels), every other group as a
    /// renamed copy of its representative's kernels, then appends them in group order. Returns
    /// the module, each group's choice and each kernel's twin (module docs).
    pub(crate) fn run(
        mut self,
        m: &irc_fused::Module,
    ) -> R<(kir::Module, Vec<crate::lower::Choice>, Vec<Option<usize>>)> {
        use rayon::prelude::*;
        let buffers: HashMap<&str, &irc_fused::Buffer> =
            m.buffers.iter().map(|b| (b.name.as_str(), b)).collect();
        let keys: Vec<String> = m.groups.par_iter().map(|g| key(g, &buffers)).collect();
        let mut first: HashMap<&str, usize> = HashMap::new();
        let rep: Vec<usize> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                if self.options.lower_each_group {
                    i
                } else {
                    *first.entry(k.as_str()).or_insert(i)
                }
            })
            .collect();
        let reps: Vec<usize> = (0..m.groups.len()).filter(|&i| rep[i] == i).collect();
        let lowered_reps: Vec<R<Rep>> = reps
            .par_iter()
            .map(|&i| {
                let l = self.group(m, &buffers, &m.groups[i])?;
                let positions = self.origin_positions(&m.groups[i], &l);
                Ok((l, positions))
            })
            .collect();
        let mut done: Vec<Option<R<Rep>>> = (0..m.groups.len()).map(|_| None).collect();
        for (&i, l) in reps.iter().zip(lowered_reps) {
            done[i] = Some(l);
        }
        let copies: Vec<(usize, R<Lowered>)> = (0..m.groups.len())
            .into_par_iter()
            .filter(|&i| rep[i] != i)
            .filter_map(|i| {
                let r = rep[i];
                // A representative that failed fails the whole module first (it comes first).
                let Some(Ok(rep)) = &done[r] else {
                    return None;
                };
                let grp = &m.groups[i];
                let l = match self.rename(&m.groups[r], rep, grp) {
                    Some(l) => Ok(l),
                    None => self.group(m, &buffers, grp),
                };
                Some((i, l))
            })
            .collect();
        let mut slot: Vec<Option<R<Lowered>>> = done
            .into_iter()
            .map(|d| d.map(|r| r.map(|(l, _)| l)))
            .collect();
        for (i, l) in copies {
            slot[i] = Some(l);
        }
        let mut choices = vec![];
        let mut twins: Vec<Option<usize>> = vec![];
        // The module index of each group's first kernel.
        let mut first_kernel: Vec<usize> = vec![0; m.groups.len()];
        for (i, l) in slot.into_iter().enumerate() {
            let Some(l) = l else {
                return Err(crate::lower::Retry::Fail(crate::LowerError::Internal(
                    "a group was not lowered".into(),
                )));
            };
            let Lowered {
                mut temps,
                kernels,
                choice,
                copied,
            } = l?;
            first_kernel[i] = self.module.kernels.len();
            self.module.buffers.append(&mut temps);
            choices.push(choice);
            for (n, (kernel, args, constants)) in kernels.into_iter().enumerate() {
                twins.push(copied.then(|| first_kernel[rep[i]] + n));
                self.module.constants.extend(constants);
                self.module.launches.push(kir::LaunchStmt {
                    kernel: kernel.name.clone(),
                    args,
                });
                self.module.kernels.push(kernel);
            }
        }
        // Equal constant arrays are one (a copy's table is its representative's): then a copy
        // that reads constants shares its representative's code too.
        dedup_constants(&mut self.module);
        debug_assert!(twins.iter().enumerate().all(|(i, t)| t.is_none_or(|j| {
            kir::shares_code(&self.module.kernels[i], &self.module.kernels[j])
        })));
        Ok((self.module, choices, twins))
    }
}

/// Merges the module's constant arrays of equal dtype and values (to the bit) into the first of
/// them, and points every kernel's constant tensors at the one kept.
fn dedup_constants(m: &mut kir::Module) {
    let mut kept: HashMap<(irc_ir::DType, Vec<u64>), String> = HashMap::new();
    let mut to: HashMap<String, String> = HashMap::new();
    m.constants.retain(|c| {
        let bits = (c.dtype, c.values.iter().map(|v| v.to_bits()).collect());
        match kept.get(&bits) {
            Some(first) => {
                to.insert(c.name.clone(), first.clone());
                false
            }
            None => {
                kept.insert(bits, c.name.clone());
                true
            }
        }
    });
    if to.is_empty() {
        return;
    }
    for k in &mut m.kernels {
        for t in &mut k.tensors {
            if let kir::Space::Const(c) = &mut t.space
                && let Some(first) = to.get(c.as_str())
            {
                *c = first.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irc_ir::DType;
    use irc_layout::Layout;

    fn constant(name: &str, dtype: DType, values: &[f64]) -> kir::ConstDecl {
        kir::ConstDecl {
            name: name.into(),
            dtype,
            values: values.to_vec(),
        }
    }

    /// Arrays merge only where dtype and every value's bits agree (`-0.0` is not `0.0`; a NaN
    /// merges with the same NaN), and each constant tensor reads the same values after.
    #[test]
    fn only_equal_arrays_merge() {
        let nan = f64::NAN;
        let consts = vec![
            constant("a", DType::F32, &[0.0, 1.0]),
            constant("b", DType::F32, &[-0.0, 1.0]),
            constant("c", DType::F16, &[0.0, 1.0]),
            constant("d", DType::I32, &[0.0, 1.0]),
            constant("e", DType::F32, &[0.0, 1.0]),
            constant("f", DType::F32, &[nan, 2.0]),
            constant("g", DType::F32, &[nan, 2.0]),
        ];
        let tensor = |name: &str, of: &str, offset: i64| kir::TensorDecl {
            name: name.into(),
            dtype: consts
                .iter()
                .find(|c| c.name == of)
                .map_or(DType::F32, |c| c.dtype),
            space: kir::Space::Const(of.into()),
            offset,
            layout: Layout::int(1, 1).expect("layout"),
        };
        let kernel = kir::Kernel {
            name: "k".into(),
            grid: [1, 1, 1],
            block: [1, 1, 1],
            index: kir::IndexWidth::I32,
            occupancy: 0,
            origins: vec![],
            params: vec![],
            tensors: ["a", "b", "c", "d", "e", "f", "g"]
                .iter()
                .enumerate()
                .map(|(i, c)| tensor(&format!("t{i}"), c, 0))
                .chain([tensor("t7", "e", 1)])
                .collect(),
            body: Default::default(),
        };
        let mut m = kir::Module {
            name: "m".into(),
            flops: 0,
            min_bytes: 0,
            buffers: vec![],
            constants: consts.clone(),
            kernels: vec![kernel],
            launches: vec![],
            results: vec![],
        };
        // What each constant tensor of the module reads: its array's dtype and values' bits.
        let reads = |m: &kir::Module| -> Vec<(DType, Vec<u64>)> {
            m.kernels[0]
                .tensors
                .iter()
                .filter_map(|t| match &t.space {
                    kir::Space::Const(c) => m.constants.iter().find(|x| &x.name == c),
                    _ => None,
                })
                .map(|d| (d.dtype, d.values.iter().map(|v| v.to_bits()).collect()))
                .collect()
        };
        let before = reads(&m);
        assert_eq!(before.len(), 8);
        dedup_constants(&mut m);
        let names: Vec<&str> = m.constants.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "f"]);
        assert_eq!(before, reads(&m));
        assert_eq!(m.kernels[0].tensors[7].offset, 1);
    }
}
