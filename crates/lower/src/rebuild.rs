//! The graph a Fused IR module computes, rebuilt for lowering (which reads values through the
//! graph: their types, their defining statements, their source locations).

use crate::LowerError;
use crate::lower::{R, Retry};
use irc_ir::{Graph, GraphBuilder, ValueId};
use std::collections::HashMap;

/// The graph a Fused IR module computes: its input buffers' values as parameters and each
/// group's ops as statements (a view recomputed by several groups once), with the source
/// location of each statement.
pub(crate) fn rebuild(m: &irc_fused::Module) -> R<(Graph, HashMap<ValueId, String>)> {
    let bad =
        |e: irc_ir::OpError| Retry::Fail(LowerError::Internal(format!("Fused IR: {}", e.message)));
    let mut b = GraphBuilder::new(m.name.clone());
    let mut id: HashMap<&str, ValueId> = HashMap::new();
    let mut locs = HashMap::new();
    for buf in m
        .buffers
        .iter()
        .filter(|b| b.kind == irc_fused::BufferKind::Input)
    {
        id.insert(&buf.value, b.param(&buf.value, buf.ty.clone()));
    }
    for o in m.groups.iter().flat_map(|g| g.ops()) {
        if id.contains_key(o.value.as_str()) {
            continue;
        }
        let operands = o
            .operands
            .iter()
            .map(|a| {
                id.get(a.as_str()).copied().ok_or_else(|| {
                    Retry::Fail(LowerError::Internal(format!("Fused IR: %{a} is undefined")))
                })
            })
            .collect::<R<Vec<_>>>()?;
        let v = b
            .op_typed(o.op, &operands, o.attrs.clone(), Some(&o.ty))
            .map_err(bad)?;
        b.name(v, &o.value);
        if let Some(l) = &o.loc {
            locs.insert(v, l.clone());
        }
        id.insert(&o.value, v);
    }
    let mut results = vec![];
    for r in &m.results {
        let buf = m.buffer(r).ok_or_else(|| {
            Retry::Fail(LowerError::Internal(format!("Fused IR: no buffer @{r}")))
        })?;
        results.push(id[buf.value.as_str()]);
    }
    Ok((b.finish(&results).map_err(bad)?, locs))
}
