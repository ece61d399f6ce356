//! Roles of a group's statements, and a matmul group's epilogue visitor tree.
//!
//! Relative to a matmul anchor, a statement is in the operand **prologue** (the anchor reads
//! it), the **anchor**, or the **epilogue** (it reads the anchor, or an auxiliary load the
//! epilogue combines with it). The epilogue is a tree in CUTLASS's EVT sense: the accumulator
//! fetch, auxiliary loads classified by how they broadcast over the output tile, compute nodes,
//! reductions and stores.

use crate::{Anchor, Buffer, Group, Module, Stmt};
use irc_ir::ops::Category;

/// A statement's part in its group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read (directly or through other prologue work) by the anchor.
    Prologue,
    Anchor,
    /// Everything else: the epilogue of a matmul, the body of a pointwise group.
    Epilogue,
}

/// How an auxiliary tensor covers a `[.., M, N]` output.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Broadcast {
    /// One element for the whole output.
    Scalar,
    /// A vector over N, the same for every row (a bias).
    Row,
    /// A vector over M, the same for every column (a row scale).
    Column,
    /// The output's own shape (a residual).
    Full,
    /// Anything else (batch-dependent vectors and the like).
    Other,
}

/// One node of an epilogue visitor tree.
#[derive(Clone, Debug, PartialEq)]
pub enum EvtNode {
    /// The accumulator of the mainloop.
    AccFetch {
        value: String,
    },
    /// A tensor read from memory and combined with the accumulator.
    AuxLoad {
        value: String,
        broadcast: Broadcast,
    },
    /// Elementwise work (and views).
    Compute {
        value: String,
        op: &'static str,
    },
    /// A reduction over the output's rows or columns.
    Reduction {
        value: String,
        op: &'static str,
    },
    Store {
        value: String,
        buffer: String,
    },
}

/// A matmul group's epilogue, in statement order.
#[derive(Clone, Debug, PartialEq)]
pub struct Evt {
    pub nodes: Vec<EvtNode>,
}

impl Group {
    /// The role of each statement (parallel to `stmts`).
    pub fn roles(&self) -> Vec<Role> {
        let mut roles = vec![Role::Epilogue; self.stmts.len()];
        let Some(a) = self.anchor_index() else {
            return roles;
        };
        roles[a] = Role::Anchor;
        // Walk back from the anchor's operands.
        let mut want: Vec<&str> = match &self.stmts[a] {
            Stmt::Op(o) => o.operands.iter().map(String::as_str).collect(),
            _ => vec![],
        };
        for i in (0..a).rev() {
            let (value, operands): (&str, Vec<&str>) = match &self.stmts[i] {
                Stmt::Load { value, .. } => (value, vec![]),
                Stmt::Op(o) => (&o.value, o.operands.iter().map(String::as_str).collect()),
                Stmt::Store { .. } => continue,
            };
            if want.contains(&value) {
                roles[i] = Role::Prologue;
                want.extend(operands);
            }
        }
        roles
    }

    /// The epilogue visitor tree of a matmul group.
    pub fn evt(&self, m: &Module) -> Option<Evt> {
        self.evt_by(|name| m.buffer(name))
    }

    /// [`Group::evt`] with buffers found by `buffer_of` (an index, on modules of many buffers).
    pub fn evt_by<'m>(&self, buffer_of: impl Fn(&str) -> Option<&'m Buffer>) -> Option<Evt> {
        let a = self.anchor_index()?;
        if self.anchor() != Anchor::Matmul {
            return None;
        }
        let Stmt::Op(anchor) = &self.stmts[a] else {
            return None;
        };
        let out = &anchor.ty.shape;
        let roles = self.roles();
        let mut nodes = vec![EvtNode::AccFetch {
            value: anchor.value.clone(),
        }];
        for (s, r) in self.stmts.iter().zip(roles) {
            if r != Role::Epilogue {
                continue;
            }
            nodes.push(match s {
                Stmt::Load { value, buffer } => EvtNode::AuxLoad {
                    value: value.clone(),
                    broadcast: buffer_of(buffer)
                        .map_or(Broadcast::Other, |b| broadcast(&b.ty.shape, out)),
                },
                Stmt::Op(o) if o.op.category() == Category::Reduction => EvtNode::Reduction {
                    value: o.value.clone(),
                    op: o.op.name(),
                },
                Stmt::Op(o) => EvtNode::Compute {
                    value: o.value.clone(),
                    op: o.op.name(),
                },
                Stmt::Store { value, buffer } => EvtNode::Store {
                    value: value.clone(),
                    buffer: buffer.clone(),
                },
            });
        }
        Some(Evt { nodes })
    }
}

/// How `aux` broadcasts over `out` (numpy rules, right-aligned).
pub fn broadcast(aux: &[u64], out: &[u64]) -> Broadcast {
    if aux.iter().product::<u64>() == 1 {
        return Broadcast::Scalar;
    }
    let dim = |k: usize| -> u64 {
        // The k-th dimension from the right, 1 when aux is shorter.
        if k < aux.len() {
            aux[aux.len() - 1 - k]
        } else {
            1
        }
    };
    let odim = |k: usize| -> u64 {
        if k < out.len() {
            out[out.len() - 1 - k]
        } else {
            1
        }
    };
    let batch_ones = (2..aux.len()).all(|k| dim(k) == 1);
    if aux == out {
        Broadcast::Full
    } else if batch_ones && dim(1) == 1 && dim(0) == odim(0) {
        Broadcast::Row
    } else if batch_ones && dim(0) == 1 && dim(1) == odim(1) {
        Broadcast::Column
    } else {
        Broadcast::Other
    }
}

impl std::fmt::Display for Evt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| match n {
                EvtNode::AccFetch { value } => format!("acc %{value}"),
                EvtNode::AuxLoad { value, broadcast } => {
                    let b = format!("{broadcast:?}").to_lowercase();
                    format!("aux %{value} ({b} broadcast)")
                }
                EvtNode::Compute { value, op } => format!("{op} %{value}"),
                EvtNode::Reduction { value, op } => format!("{op} %{value}"),
                EvtNode::Store { value, buffer } => format!("store %{value} -> @{buffer}"),
            })
            .collect();
        f.write_str(&parts.join("; "))
    }
}
