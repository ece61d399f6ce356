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
//! A move is judged by the cost of a window of the selected DAG around it (`search.rs`): exact
//! when the window holds the whole DAG (up to [`crate::search::WINDOW`] classes), and on larger
//! graphs a local estimate, with the whole DAG re-costed after every round (a round that did
//! not pay is undone). The search is not exact in general: a gain that needs several classes to
//! change at once is found only in the one shape [`unshare`] tries (a shared producer absorbed
//! by all its readers); an exact ILP extractor would find the rest.
//!
//! Every stage is near-linear in the e-graph: the seed is one Dijkstra-like pass, a move costs a
//! window (not the DAG), and the search keeps readers, liveness and a topological labelling up
//! to date instead of recomputing them.

use crate::cost::{Cost, Dag, DagNode, INFINITY, Target, dag_cost};
use crate::lang::{EGraph, Head, Node};
use crate::search::{Kids, NONE, Search};
use egg::{Id, Language};
use std::borrow::Cow;
use std::collections::HashMap;

/// A selection: one node per reachable class.
pub type Choice = HashMap<Id, Node>;

/// A selection as the search keeps it: for each class id, the index of the chosen node in
/// the class (`NONE` for none). Cheap to copy and to look up.
type Sel = Vec<u32>;

/// The seed's local cost of a node: strictly positive, so a cyclic choice never wins.
/// `bytes` is the size of each class's type, by class id.
fn local_cost(bytes: &[u64], n: &Node) -> Cost {
    match n.head {
        Head::Param(_) => 1,
        Head::Op(op) => match op.category() {
            irc_ir::ops::Category::View => 1,
            irc_ir::ops::Category::Constant => 1,
            _ => {
                1 + n
                    .children
                    .iter()
                    .map(|&c| bytes[usize::from(c)])
                    .sum::<u64>()
                    / 64
                    + 1000
            }
        },
    }
}

fn class_bytes(eg: &EGraph) -> Vec<u64> {
    let mut bytes = vec![0; id_bound(eg)];
    for c in eg.classes() {
        bytes[usize::from(c.id)] = c.data.ty.as_ref().map_or(0, |t| t.size_bytes());
    }
    bytes
}

fn id_bound(eg: &EGraph) -> usize {
    eg.classes()
        .map(|c| usize::from(c.id))
        .max()
        .map_or(0, |m| m + 1)
}

/// The seed: best costs per class, as egg's extractor computes them, except that a node costs
/// its own cost plus the *largest* of its children's, not their sum. A tree sum doubles at
/// every shared value (a residual stream makes it exponential in depth and it saturates); the
/// max stays finite, and a strictly positive own cost still rules out cycles.
///
/// Computed in one pass, Knuth's generalisation of Dijkstra's algorithm: a node's cost is known
/// once all its children's classes are final, and the cheapest known node of any class is final
/// (costs only grow along edges). That is `O(E log E)`; the fixed-point iteration it replaces
/// took one sweep over the whole e-graph per level of depth (quadratic on a long chain). Ties
/// go to the lower node index of a class.
fn seed(eg: &EGraph) -> Sel {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let n = id_bound(eg);
    let bytes = class_bytes(eg);
    // Every node of a typed class: its class, its index there, its own cost, its distinct
    // children (a range of `kids`) and how many of them are not final yet.
    struct Entry {
        class: u32,
        index: u32,
        own: Cost,
        kids: std::ops::Range<usize>,
        pending: u32,
    }
    let mut entries: Vec<Entry> = Vec::new();
    let mut kids: Vec<u32> = Vec::new();
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut heap: BinaryHeap<Reverse<(Cost, u32, u32)>> = BinaryHeap::new();
    for class in eg.classes() {
        if class.data.ty.is_none() {
            continue;
        }
        for (i, node) in class.nodes.iter().enumerate() {
            let from = kids.len();
            for &ch in &node.children {
                let ch = usize::from(eg.find(ch)) as u32;
                if !kids[from..].contains(&ch) {
                    kids.push(ch);
                }
            }
            let e = entries.len() as u32;
            for &ch in &kids[from..] {
                readers[ch as usize].push(e);
            }
            let own = local_cost(&bytes, node);
            let pending = (kids.len() - from) as u32;
            if pending == 0 {
                heap.push(Reverse((own, usize::from(class.id) as u32, i as u32)));
            }
            entries.push(Entry {
                class: usize::from(class.id) as u32,
                index: i as u32,
                own,
                kids: from..kids.len(),
                pending,
            });
        }
    }
    let mut best: Vec<(Cost, u32)> = vec![(INFINITY, NONE); n];
    while let Some(Reverse((cost, class, index))) = heap.pop() {
        let slot = &mut best[class as usize];
        if slot.1 != NONE || cost == INFINITY {
            continue;
        }
        *slot = (cost, index);
        for &e in &readers[class as usize] {
            let entry = &mut entries[e as usize];
            entry.pending -= 1;
            if entry.pending == 0 && best[entry.class as usize].1 == NONE {
                let c = kids[entry.kids.clone()]
                    .iter()
                    .map(|&k| best[k as usize].0)
                    .max()
                    .unwrap_or(0)
                    .saturating_add(entry.own);
                heap.push(Reverse((c, entry.class, entry.index)));
            }
        }
    }
    best.into_iter().map(|(_, i)| i).collect()
}

fn chosen<'a>(table: &Kids<'a>, sel: &Sel, c: Id) -> Option<&'a Node> {
    let i = *sel.get(usize::from(c))?;
    if i == NONE {
        None
    } else {
        table.class(usize::from(c) as u32).nodes.get(i as usize)
    }
}

/// The selected DAG reachable from `roots`, or `None` if the selection has a cycle or a hole.
fn sel_to_dag<'a>(eg: &EGraph, table: &Kids<'a>, sel: &Sel, roots: &[Id]) -> Option<Dag<'a>> {
    let n = sel.len();
    let mut index = vec![NONE; n];
    let mut on_path = vec![false; n];
    let mut d = Dag::default();
    for &root in roots {
        let root = eg.find(root);
        let mut stack = vec![(root, false)];
        while let Some((c, expanded)) = stack.pop() {
            let ci = usize::from(c);
            if index[ci] != NONE {
                continue;
            }
            let node = chosen(table, sel, c)?;
            if !expanded {
                if on_path[ci] {
                    return None;
                }
                on_path[ci] = true;
                stack.push((c, true));
                for &ch in node.children.iter().rev() {
                    let ch = eg.find(ch);
                    if on_path[usize::from(ch)] && index[usize::from(ch)] == NONE {
                        return None;
                    }
                    if index[usize::from(ch)] == NONE {
                        stack.push((ch, false));
                    }
                }
                continue;
            }
            on_path[ci] = false;
            let children = node
                .children
                .iter()
                .map(|&ch| {
                    let k = index[usize::from(eg.find(ch))];
                    (k != NONE).then_some(k as usize)
                })
                .collect::<Option<Vec<_>>>()?;
            index[ci] = d.nodes.len() as u32;
            d.nodes.push(DagNode {
                node: Cow::Borrowed(node),
                ty: table.class(ci as u32).data.ty.as_ref(),
                children,
            });
        }
        d.results.push(index[usize::from(root)] as usize);
    }
    Some(d)
}

fn to_sel(eg: &EGraph, choice: &Choice) -> Sel {
    let mut sel = vec![NONE; id_bound(eg)];
    for (&c, n) in choice {
        let c = eg.find(c);
        let n = n.clone().map_children(|ch| eg.find(ch));
        if let Some(i) = eg[c].nodes.iter().position(|m| *m == n) {
            sel[usize::from(c)] = i as u32;
        }
    }
    sel
}

fn to_choice(eg: &EGraph, table: &Kids, sel: &Sel, roots: &[u32]) -> Choice {
    reachable_classes(eg, table, sel, roots)
        .into_iter()
        .filter_map(|c| chosen(table, sel, c).map(|n| (c, n.clone())))
        .collect()
}

/// The selected DAG reachable from `roots`, or `None` if the choice has a cycle or a hole.
pub fn to_dag<'a>(eg: &'a EGraph, choice: &Choice, roots: &[Id]) -> Option<Dag<'a>> {
    let sel = to_sel(eg, choice);
    sel_to_dag(eg, &Kids::new(eg, sel.len()), &sel, roots)
}

fn cost_of(t: &Target, eg: &EGraph, table: &Kids, sel: &Sel, roots: &[Id]) -> Cost {
    sel_to_dag(eg, table, sel, roots).map_or(INFINITY, |d| dag_cost(t, &d))
}

/// What extraction found.
pub struct Extracted {
    pub choice: Choice,
    pub cost: Cost,
    /// Swaps the local search kept.
    pub improvements: usize,
    /// Rounds of the local search, and the moves it judged.
    pub rounds: usize,
    pub tried: usize,
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
    // The seed and the table of classes are independent: computed in parallel.
    let n = id_bound(eg);
    let (mut sel, table) = rayon::join(|| seed(eg), || Kids::new(eg, n));
    let mut laid = vec![false; sel.len()];
    for (c, n) in initial {
        let c = eg.find(*c);
        let n = n.clone().map_children(|ch| eg.find(ch));
        // A statement that became its own operand's class (an identity view, `transpose` by
        // `[0, 1]`) is not laid: it would read itself; the class's other statement is.
        if n.children.contains(&c) {
            continue;
        }
        if !std::mem::replace(&mut laid[usize::from(c)], true) {
            if let Some(i) = eg[c].nodes.iter().position(|m| *m == n) {
                sel[usize::from(c)] = i as u32;
            }
        }
    }
    // (The search needs an acyclic selection: it is set up once the input's is known to be.)
    let mut cost = match sel_to_dag(eg, &table, &sel, roots) {
        Some(d) => dag_cost(t, &d),
        None => {
            sel = seed(eg);
            cost_of(t, eg, &table, &sel, roots)
        }
    };
    let mut improvements = 0;
    let mut search = Search::new(t, eg, &table, roots, sel);
    let (mut rounds, mut tried) = (0, 0);
    // A selection with a hole (a class no node of which is typed) has nothing to search from;
    // the caller's rebuild reports it.
    let max_rounds = if cost == INFINITY { 0 } else { max_rounds };
    for _ in 0..max_rounds {
        rounds += 1;
        let start = search.sel.clone();
        let mut kept = 0;
        for c in reachable_classes(eg, &table, &start, &search.roots) {
            let ci = usize::from(c);
            let class = table.class(ci as u32);
            let count = class.nodes.len();
            if count < 2 || !search.is_live(ci as u32) {
                continue;
            }
            for i in 0..count as u32 {
                if search.sel[ci] == i
                    || table
                        .get(ci as u32, i)
                        .iter()
                        .any(|&ch| search.sel[ch as usize] == NONE)
                {
                    continue;
                }
                tried += 1;
                if search.try_move(&[(ci as u32, i)]).is_some() {
                    kept += 1;
                }
            }
        }
        kept += unshare(eg, &mut search);
        if kept == 0 {
            break;
        }
        // Moves were judged on windows: re-cost the whole DAG, and undo a round that did not pay.
        let new_cost = cost_of(t, eg, &table, &search.sel, roots);
        if new_cost >= cost {
            search.sel = start;
            search.rebuild();
            break;
        }
        cost = new_cost;
        improvements += kept;
    }
    Extracted {
        choice: to_choice(eg, &table, &search.sel, &search.roots),
        cost,
        improvements,
        rounds,
        tried,
    }
}

/// The most readers a producer may have for [`unshare`] to try dropping it.
pub const UNSHARE_READERS: usize = 16;

/// The one move single swaps cannot make: stop using a shared producer. For each selected
/// class read by two or more selected classes, switch every reader to its cheapest
/// alternative that does not read it (so the producer drops out of the DAG), and keep the
/// result if the whole DAG got cheaper. This is what lets one `rmsnorm` feeding three matmuls
/// be absorbed by all three at once. Returns how many such moves it kept.
///
/// A producer with more than [`UNSHARE_READERS`] readers is left alone: the readers are switched
/// one after the other, each judged with the ones before it, so the move costs the square of
/// their number, and what has that many readers (a splat constant shared by every layer, a
/// parameter) has no kernel to save.
fn unshare(eg: &EGraph, search: &mut Search) -> usize {
    let mut kept = 0;
    for (p, users) in search.shared() {
        if users.len() > UNSHARE_READERS {
            continue;
        }
        let pid = Id::from(p as usize);
        // Every reader needs an alternative that does not read `p`; most have none (a class
        // of one node), and then there is nothing to try.
        let has_alternative = |u: u32| {
            eg[Id::from(u as usize)]
                .nodes
                .iter()
                .any(|n| n.children.iter().all(|&ch| eg.find(ch) != pid))
        };
        if !users.iter().all(|&u| has_alternative(u)) {
            continue;
        }
        let mut mv: Vec<(u32, u32)> = Vec::with_capacity(users.len());
        let mut ok = true;
        for &u in &users {
            let mut best: Option<(i128, u32)> = None;
            for (i, n) in eg[Id::from(u as usize)].nodes.iter().enumerate() {
                if n.children.iter().any(|&ch| {
                    let ch = eg.find(ch);
                    ch == pid || search.sel[usize::from(ch)] == NONE
                }) {
                    continue;
                }
                mv.push((u, i as u32));
                let d = search.delta(&mv);
                mv.pop();
                if let Some(d) = d
                    && best.is_none_or(|(bd, _)| d < bd)
                {
                    best = Some((d, i as u32));
                }
            }
            match best {
                Some((_, i)) => mv.push((u, i)),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && search.try_move(&mv).is_some() {
            kept += 1;
        }
    }
    kept
}

/// The classes the selection reaches from `roots` (canonical ids), each once, in the order of
/// a depth-first walk over each node's children as written.
fn reachable_classes(eg: &EGraph, table: &Kids, sel: &Sel, roots: &[u32]) -> Vec<Id> {
    let mut seen = vec![false; sel.len()];
    let mut order = vec![];
    let mut stack: Vec<Id> = roots.iter().map(|&r| Id::from(r as usize)).collect();
    while let Some(c) = stack.pop() {
        if std::mem::replace(&mut seen[usize::from(c)], true) {
            continue;
        }
        order.push(c);
        if let Some(n) = chosen(table, sel, c) {
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
    /// class holds `relu(e)` (reads e, already paid for) and `add(y, z)` (reads two other
    /// tensors, neither of them `exp`'s: no sibling kernel to share). Tree cost counts `exp`
    /// again under `relu(e)` and prefers `add`; the DAG cost counts it once and keeps
    /// `relu(e)`.
    #[test]
    fn shared_producer_is_counted_once() {
        let t = TensorType::new([1024, 1024], DType::F32);
        let mut eg = EGraph::new(TypeAnalysis {
            params: vec![t.clone(), t.clone(), t],
            known: None,
        });
        let param = |i| Node {
            head: Head::Param(i),
            attrs: vec![],
            written_ty: None,
            children: vec![],
        };
        let x = eg.add(param(0));
        let y = eg.add(param(1));
        let z = eg.add(param(2));
        let e = op(&mut eg, OpKind::Exp, &[x]);
        let r = op(&mut eg, OpKind::Relu, &[e]);
        let a = op(&mut eg, OpKind::Add, &[y, z]);
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
            n.children
                .iter()
                .fold(local_cost(&class_bytes(self.0), n), |acc, &c| {
                    acc.saturating_add(costs(c))
                })
        }
    }
}
