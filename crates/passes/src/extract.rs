//! DAG-aware extraction: choose one e-node per e-class so that the selected graph's
//! [`dag_cost`] — where a shared producer is counted once — is as small as we can find.
//!
//! egg's `Extractor` minimizes tree cost (a producer feeding two consumers is paid twice), so
//! it can prefer recomputing a value to sharing it. Here a tree-cost pass only seeds the
//! selection; a local search then swaps one class's node at a time and keeps a swap when the
//! whole selected DAG gets cheaper, until a round changes nothing (or `max_rounds`). Each
//! evaluation is exact on the DAG; the search is exact whenever the best selection is reached
//! by single swaps, which holds for the graphs our rules produce (alternatives differ locally).

use crate::cost::{Cost, Dag, DagNode, INFINITY, Target, dag_cost};
use crate::lang::{EGraph, Head, Node};
use egg::Id;
use std::collections::HashMap;

/// A selection: one node per reachable class.
pub type Choice = HashMap<Id, Node>;

/// The seed's local cost of a node: strictly positive, so a cyclic choice never wins.
fn local_cost(eg: &EGraph, n: &Node) -> Cost {
    let bytes = |id: Id| eg[id].data.ty.as_ref().map_or(0, |t| t.size_bytes());
    match n.head {
        Head::Param(_) => 1,
        Head::Op(op) => match op.category() {
            irc_ir::ops::Category::View => 1,
            irc_ir::ops::Category::Constant => 1,
            _ => 1 + n.children.iter().map(|&c| bytes(c)).sum::<u64>() / 64 + 1000,
        },
    }
}

/// Tree-cost seed, as egg's extractor does: a fixed point of best costs per class.
fn seed(eg: &EGraph) -> Choice {
    let mut best: HashMap<Id, (Cost, Node)> = HashMap::new();
    loop {
        let mut changed = false;
        for class in eg.classes() {
            for n in &class.nodes {
                let mut c = local_cost(eg, n);
                for &ch in &n.children {
                    match best.get(&eg.find(ch)) {
                        Some((cc, _)) => c = c.saturating_add(*cc),
                        None => c = INFINITY,
                    }
                }
                if c == INFINITY || eg[class.id].data.ty.is_none() {
                    continue;
                }
                if best.get(&class.id).is_none_or(|(old, _)| c < *old) {
                    best.insert(class.id, (c, n.clone()));
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    best.into_iter().map(|(k, (_, n))| (k, n)).collect()
}

/// The selected DAG reachable from `roots`, or `None` if the choice has a cycle or a hole.
pub fn to_dag(eg: &EGraph, choice: &Choice, roots: &[Id]) -> Option<Dag> {
    let mut index: HashMap<Id, usize> = HashMap::new();
    let mut d = Dag::default();
    let mut state: HashMap<Id, bool> = HashMap::new(); // false: on the path, true: done
    for &root in roots {
        let root = eg.find(root);
        let mut stack = vec![(root, false)];
        while let Some((c, expanded)) = stack.pop() {
            if state.get(&c) == Some(&true) && !expanded {
                continue;
            }
            let n = choice.get(&c)?;
            if !expanded {
                if state.get(&c) == Some(&false) {
                    return None;
                }
                state.insert(c, false);
                stack.push((c, true));
                for &ch in n.children.iter().rev() {
                    let ch = eg.find(ch);
                    match state.get(&ch) {
                        Some(true) => {}
                        Some(false) => return None,
                        None => stack.push((ch, false)),
                    }
                }
                continue;
            }
            if state.get(&c) == Some(&true) {
                continue;
            }
            let children = n
                .children
                .iter()
                .map(|&ch| index.get(&eg.find(ch)).copied())
                .collect::<Option<Vec<_>>>()?;
            index.insert(c, d.nodes.len());
            d.nodes.push(DagNode {
                node: n.clone(),
                ty: eg[c].data.ty.clone(),
                children,
            });
            state.insert(c, true);
        }
        d.results.push(index[&root]);
    }
    Some(d)
}

fn cost_of(t: &Target, eg: &EGraph, choice: &Choice, roots: &[Id]) -> Cost {
    to_dag(eg, choice, roots).map_or(INFINITY, |d| dag_cost(t, &d))
}

/// What extraction found.
pub struct Extracted {
    pub choice: Choice,
    pub cost: Cost,
    /// Swaps the local search kept.
    pub improvements: usize,
}

/// Extracts the cheapest selection found for `roots`.
pub fn extract(t: &Target, eg: &EGraph, roots: &[Id], max_rounds: usize) -> Extracted {
    let mut choice = seed(eg);
    let mut cost = cost_of(t, eg, &choice, roots);
    let mut improvements = 0;
    for _ in 0..max_rounds {
        let mut improved = false;
        let reachable: Vec<Id> = match to_dag(eg, &choice, roots) {
            Some(_) => reachable_classes(eg, &choice, roots),
            None => break,
        };
        for c in reachable {
            let nodes = &eg[c].nodes;
            if nodes.len() < 2 {
                continue;
            }
            for n in nodes {
                if choice.get(&c) == Some(n)
                    || n.children
                        .iter()
                        .any(|&ch| !choice.contains_key(&eg.find(ch)))
                {
                    continue;
                }
                let old = choice.insert(c, n.clone());
                let new_cost = cost_of(t, eg, &choice, roots);
                if new_cost < cost {
                    cost = new_cost;
                    improvements += 1;
                    improved = true;
                } else if let Some(old) = old {
                    choice.insert(c, old);
                }
            }
        }
        if !improved {
            break;
        }
    }
    Extracted {
        choice,
        cost,
        improvements,
    }
}

fn reachable_classes(eg: &EGraph, choice: &Choice, roots: &[Id]) -> Vec<Id> {
    let mut seen = std::collections::HashSet::new();
    let mut order = vec![];
    let mut stack: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        order.push(c);
        if let Some(n) = choice.get(&c) {
            stack.extend(n.children.iter().map(|&ch| eg.find(ch)));
        }
    }
    order
}
