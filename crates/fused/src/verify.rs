//! The Fused IR verifier. A module that passes can be lowered: every template may assume these.
//!
//! **Buffers**
//! - Buffer names are unique; every `load`, `store` and `return` names a declared buffer.
//! - Input buffers are never stored; every output and temp buffer is stored exactly once.
//!
//! **Groups**
//! - Group names are unique; a group stores at least one value.
//! - SSA inside a group: each value is defined once, before its uses.
//! - A load reads an input buffer or one stored by an earlier group (kernels run in order), and
//!   names the buffer's value (`%x = load @x` where `buffer @x = %x`).
//! - Every op type-checks with the graph IR's own typing rule (`check_op`) at its written type.
//! - A value defined in several groups (a view recomputed by each reader) is the same statement
//!   everywhere.
//! - At most one anchor per group, except an attention group's three (a matmul, a softmax over
//!   the last axis computed from it, a matmul reading the softmax: `Group::attention`), which
//!   stores only its last anchor or values computed from it; a reduction group stores only its
//!   anchor's result or one view of it (a result view the anchor's kernel stores through its
//!   layout); a norm prologue group (`Group::norm_prologue`: an rmsnorm read only as its
//!   matmul's first operand) has two, and stores from the matmul; a matmul group with row
//!   or column reductions in its epilogue (`Group::epilogue_reductions`: sums, maxima, minima
//!   or means over the last axis or the one before it alone, of values of the matmul's shape
//!   computed from it, the matmul reading no vector, read by nothing in the
//!   group) has one more anchor for each; a matmul group only its
//!   anchor or values computed from it (its epilogue); a row
//!   group values computed from its anchor (a view of it, its epilogue) or the anchor's input
//!   (the policy's rule 9).
//! - A stored value has its buffer's type.
//!
//! Not checked yet: that a group's prologue/epilogue is one the templates can build (lowering
//! reports that as an error naming the group).

use crate::{Anchor, BufferKind, Module, OpStmt, Stmt};
use irc_ir::{Category, TensorType, check_op};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// A broken invariant, naming the group (if any) and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct VerifyError {
    pub group: Option<String>,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.group {
            Some(g) => write!(f, "in group @{g}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Checks the invariants of the module doc.
pub fn verify_module(m: &Module) -> Result<(), VerifyError> {
    let top = |message: String| VerifyError {
        group: None,
        message,
    };
    let mut buffers = HashMap::new();
    for b in &m.buffers {
        if buffers.insert(b.name.as_str(), b).is_some() {
            return Err(top(format!("buffer @{} is declared twice", b.name)));
        }
    }
    let mut stored: HashMap<&str, usize> = HashMap::new();
    let mut defs: HashMap<&str, &OpStmt> = HashMap::new();
    let mut group_names = std::collections::HashSet::new();
    for (gi, g) in m.groups.iter().enumerate() {
        let fail = |message: String| VerifyError {
            group: Some(g.name.clone()),
            message,
        };
        if !group_names.insert(g.name.as_str()) {
            return Err(fail("the group name is used twice".into()));
        }
        let mut local: HashMap<&str, &TensorType> = HashMap::new();
        // Values that depend on the anchor (for the epilogue check).
        let mut after_anchor: HashSet<&str> = HashSet::new();
        // The anchor and views of it (what a reduction or row group may store).
        let mut views_of_anchor: HashSet<&str> = HashSet::new();
        let mut anchors = 0;
        // A row composite's input (a row group may store it: the policy's rule 9).
        let mut row_input: Option<&str> = None;
        let mut row_stores: Vec<&str> = vec![];
        let reductions = g.epilogue_reductions().is_some();
        for s in &g.stmts {
            match s {
                Stmt::Load { value, buffer } => {
                    let b = buffers
                        .get(buffer.as_str())
                        .ok_or_else(|| fail(format!("load of undeclared buffer @{buffer}")))?;
                    if b.kind != BufferKind::Input
                        && stored.get(buffer.as_str()).is_none_or(|&s| s >= gi)
                    {
                        return Err(fail(format!(
                            "@{buffer} is loaded before a kernel stores it"
                        )));
                    }
                    if &b.value != value {
                        return Err(fail(format!("@{buffer} holds %{}, not %{value}", b.value)));
                    }
                    if local.insert(value, &b.ty).is_some() {
                        return Err(fail(format!("%{value} is defined twice")));
                    }
                }
                Stmt::Op(o) => {
                    let mut tys = vec![];
                    for a in &o.operands {
                        tys.push(*local.get(a.as_str()).ok_or_else(|| {
                            fail(format!("%{} uses %{a} before it is defined", o.value))
                        })?);
                    }
                    check_op(o.op, &tys, &o.attrs, Some(&o.ty)).map_err(|e| {
                        fail(format!("%{} = {}: {}", o.value, o.op.name(), e.message))
                    })?;
                    if local.insert(&o.value, &o.ty).is_some() {
                        return Err(fail(format!("%{} is defined twice", o.value)));
                    }
                    if let Some(prev) = defs.insert(&o.value, o)
                        && prev != o
                    {
                        return Err(fail(format!(
                            "%{} is defined differently in another group",
                            o.value
                        )));
                    }
                    if Anchor::of(o.op).is_some() && anchors > 0 && reductions {
                        // A reduction of the matmul's epilogue: a leaf computed from it.
                        anchors += 1;
                        after_anchor.insert(&o.value);
                    } else if Anchor::of(o.op).is_some() {
                        anchors += 1;
                        if Anchor::of(o.op) == Some(Anchor::Row) {
                            row_input = o.operands.first().map(String::as_str);
                        }
                        // An attention group's stores are computed from its last anchor.
                        after_anchor.clear();
                        views_of_anchor.clear();
                        after_anchor.insert(&o.value);
                        views_of_anchor.insert(&o.value);
                    } else if o.operands.iter().any(|a| after_anchor.contains(a.as_str())) {
                        after_anchor.insert(&o.value);
                        // (A slice is a view too: a layout with an offset.)
                        if matches!(o.op.category(), Category::View | Category::Slice)
                            && views_of_anchor.contains(o.operands[0].as_str())
                        {
                            views_of_anchor.insert(&o.value);
                        }
                    }
                }
                Stmt::Store { value, buffer } => {
                    let b = buffers
                        .get(buffer.as_str())
                        .ok_or_else(|| fail(format!("store to undeclared buffer @{buffer}")))?;
                    if b.kind == BufferKind::Input {
                        return Err(fail(format!("store to the input buffer @{buffer}")));
                    }
                    let ty = local
                        .get(value.as_str())
                        .ok_or_else(|| fail(format!("store of undefined %{value}")))?;
                    if *ty != &b.ty {
                        return Err(fail(format!(
                            "%{value} : {ty} stored to @{buffer} : {}",
                            b.ty
                        )));
                    }
                    if stored.insert(buffer, gi).is_some() {
                        return Err(fail(format!("@{buffer} is stored twice")));
                    }
                    row_stores.push(value.as_str());
                }
            }
        }
        for value in row_stores {
            let ok = match g.anchor() {
                Anchor::Pointwise => true,
                Anchor::Reduction => views_of_anchor.contains(value),
                Anchor::Row => after_anchor.contains(value) || row_input == Some(value),
                Anchor::Matmul | Anchor::Attention => after_anchor.contains(value),
            };
            if !ok {
                return Err(fail(format!(
                    "%{value} is stored but is not computed from the {} anchor{}",
                    g.anchor().name(),
                    if g.anchor() == Anchor::Row {
                        " nor its input"
                    } else {
                        ""
                    }
                )));
            }
        }
        // A matmul with epilogue reductions reads two matrices (a vector operand is the
        // matrix-vector template's, which has none).
        if reductions {
            let vector = g
                .ops()
                .find(|o| Anchor::of(o.op) == Some(Anchor::Matmul))
                .is_some_and(|mo| {
                    mo.operands
                        .iter()
                        .any(|a| local.get(a.as_str()).is_some_and(|t| t.rank() < 2))
                });
            if vector {
                return Err(fail(
                    "a matmul with a vector operand has no epilogue reductions".into(),
                ));
            }
        }
        if anchors > 1
            && g.anchor() != Anchor::Attention
            && g.norm_prologue().is_none()
            && !reductions
        {
            return Err(fail(format!("{anchors} anchors in one group")));
        }
        if g.stores().next().is_none() {
            return Err(fail("the group stores nothing".into()));
        }
    }
    for b in &m.buffers {
        if b.kind != BufferKind::Input && !stored.contains_key(b.name.as_str()) {
            return Err(top(format!("@{} is never stored", b.name)));
        }
    }
    for r in &m.results {
        if !buffers.contains_key(r.as_str()) {
            return Err(top(format!("return of undeclared buffer @{r}")));
        }
    }
    Ok(())
}
