//! DAG-aware extraction: choose one e-node per e-class so that the selected graph's
//! [`dag_cost`] — where a shared producer is counted once — is as small as we can find.
//!
//! egg's `Extractor` minimizes tree cost: a producer feeding two consumers is paid twice, so it
//! can prefer recomputing a value to sharing it, and on a residual stream the tree cost doubles
//! per layer until it saturates. Here a cheap bottom-up pass only seeds the selection, the
//! input graph's own nodes are laid over the seed (so the result is never worse than the
//! input), and a local search swaps one class's node at a time, keeping a swap when the whole
//! selected DAG gets cheaper, until a round changes nothing (or `max_rounds`).
//!
//! Every evaluation is exact on the DAG. The search is not exact in general: a gain that needs
//! several classes to change at once (an rmsnorm shared by three matmuls, each of which could
//! absorb it) is not found, and the input's choice stays. An exact ILP extractor would find it;
//! at a few thousand classes single swaps are what fits the time budget.

use crate::cost::{Cost, Dag, DagNode, INFINITY, Target, dag_cost};
use crate::lang::{EGraph, Head, Node};
use egg::{Id, Language};
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

/// The seed: a fixed point of best costs per class, as egg's extractor computes, except that a
/// node costs its own cost plus the *largest* of its children's, not their sum. A tree sum
/// doubles at every shared value (a residual stream makes it exponential in depth and it
/// saturates); the max stays finite, and a strictly positive own cost still rules out cycles.
fn seed(eg: &EGraph) -> Choice {
    let mut best: HashMap<Id, (Cost, Node)> = HashMap::new();
    loop {
        let mut changed = false;
        for class in eg.classes() {
            for n in &class.nodes {
                let mut c = 0;
                for &ch in &n.children {
                    match best.get(&eg.find(ch)) {
                        Some((cc, _)) => c = c.max(*cc),
                        None => c = INFINITY,
                    }
                }
                let c = c.saturating_add(local_cost(eg, n));
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

/// Extracts the cheapest selection found for `roots`, starting from the seed with
/// `initial`'s choices (the input graph's own nodes) laid over it: the result is never worse
/// than `initial`.
pub fn extract(
    t: &Target,
    eg: &EGraph,
    roots: &[Id],
    initial: &[(Id, Node)],
    max_rounds: usize,
) -> Extracted {
    let mut choice = seed(eg);
    let mut laid = std::collections::HashSet::new();
    for (c, n) in initial {
        let c = eg.find(*c);
        let n = n.clone().map_children(|ch| eg.find(ch));
        if laid.insert(c) && eg[c].nodes.contains(&n) {
            choice.insert(c, n);
        }
    }
    if to_dag(eg, &choice, roots).is_none() {
        choice = seed(eg);
    }
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
        let unshared = unshare(t, eg, roots, &mut choice, &mut cost);
        if unshared > 0 {
            improvements += unshared;
            improved = true;
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

/// The one move single swaps cannot make: stop using a shared producer. For each selected
/// class read by two or more selected classes, switch every reader to its cheapest
/// alternative that does not read it (so the producer drops out of the DAG), and keep the
/// result if the whole DAG got cheaper. This is what lets one `rmsnorm` feeding three matmuls
/// be absorbed by all three at once. Returns how many such moves it kept.
fn unshare(t: &Target, eg: &EGraph, roots: &[Id], choice: &mut Choice, cost: &mut Cost) -> usize {
    let mut kept = 0;
    let reachable = reachable_classes(eg, choice, roots);
    let mut readers: HashMap<Id, Vec<Id>> = HashMap::new();
    for &c in &reachable {
        let Some(n) = choice.get(&c) else { continue };
        for &ch in &n.children {
            let ch = eg.find(ch);
            let list = readers.entry(ch).or_default();
            if !list.contains(&c) {
                list.push(c);
            }
        }
    }
    let root_set: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    let mut shared: Vec<(Id, Vec<Id>)> = readers
        .into_iter()
        .filter(|(p, users)| users.len() >= 2 && !root_set.contains(p))
        .collect();
    shared.sort();
    for (p, users) in shared {
        let mut trial = choice.clone();
        let mut ok = true;
        for &u in &users {
            let mut best: Option<(Cost, Node)> = None;
            for n in &eg[u].nodes {
                if n.children
                    .iter()
                    .any(|&ch| eg.find(ch) == p || !trial.contains_key(&eg.find(ch)))
                {
                    continue;
                }
                let old = trial.insert(u, n.clone());
                let c = cost_of(t, eg, &trial, roots);
                if let Some(old) = old {
                    trial.insert(u, old);
                }
                if best.as_ref().is_none_or(|(bc, _)| c < *bc) {
                    best = Some((c, n.clone()));
                }
            }
            match best {
                Some((_, n)) => {
                    trial.insert(u, n);
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            let c = cost_of(t, eg, &trial, roots);
            if c < *cost {
                *choice = trial;
                *cost = c;
                kept += 1;
            }
        }
    }
    kept
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::{Node, TypeAnalysis};
    use irc_ir::{Attrs, DType, OpKind, TensorType};

    fn op(eg: &mut EGraph, k: OpKind, kids: &[Id]) -> Id {
        eg.add(Node::op(k, &Attrs::new(), kids.to_vec()))
    }

    /// One producer feeding two consumers: `e = exp(x)` is a result, and the second result's
    /// class holds `relu(e)` (reads e, already paid for) and `add(x, y)` (reads two other
    /// tensors). Tree cost counts `exp` again under `relu(e)` and prefers `add`; the DAG cost
    /// counts it once and keeps `relu(e)`.
    #[test]
    fn shared_producer_is_counted_once() {
        let t = TensorType::new([1024, 1024], DType::F32);
        let mut eg = EGraph::new(TypeAnalysis {
            params: vec![t.clone(), t],
        });
        let param = |i| Node {
            head: Head::Param(i),
            attrs: vec![],
            const_ty: None,
            children: vec![],
        };
        let x = eg.add(param(0));
        let y = eg.add(param(1));
        let e = op(&mut eg, OpKind::Exp, &[x]);
        let r = op(&mut eg, OpKind::Relu, &[e]);
        let a = op(&mut eg, OpKind::Add, &[x, y]);
        eg.union(r, a);
        eg.rebuild();
        let roots = [eg.find(e), eg.find(r)];
        // What a tree-cost extractor (egg's, with the same local costs) picks:
        let tree = egg::Extractor::new(&eg, TreeCost(&eg))
            .find_best(roots[1])
            .1;
        assert!(
            tree.as_ref().iter().any(|n| n.is(OpKind::Add)),
            "tree cost prefers add: {tree:?}"
        );
        let ex = extract(&Target::h100(), &eg, &roots, &[], 4);
        assert!(
            ex.choice[&roots[1]].is(OpKind::Relu),
            "DAG cost keeps relu(e)"
        );
        let d = to_dag(&eg, &ex.choice, &roots).expect("acyclic");
        assert_eq!(d.nodes.iter().filter(|n| n.node.is(OpKind::Exp)).count(), 1);
    }

    struct TreeCost<'a>(&'a EGraph);
    impl egg::CostFunction<Node> for TreeCost<'_> {
        type Cost = Cost;
        fn cost<C: FnMut(Id) -> Cost>(&mut self, n: &Node, mut costs: C) -> Cost {
            n.children.iter().fold(local_cost(self.0, n), |acc, &c| {
                acc.saturating_add(costs(c))
            })
        }
    }
}
