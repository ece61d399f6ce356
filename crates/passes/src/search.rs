//! The local search of extraction, with moves judged on a window of the selected DAG.
//!
//! A move changes the chosen node of one or more classes. Re-costing the whole selected DAG per
//! candidate move (as the search first did) makes extraction `O(candidates × DAG)`: 48 s on a
//! 16k-statement graph. Here the search keeps the selected DAG's reader lists, liveness and a
//! topological height per class up to date, and judges a move by [`dag_cost`] on a *window*:
//! the changed classes, a breadth-first neighbourhood of them in the selected DAG (children and
//! readers, up to [`WINDOW`] classes), every class the move kills (no longer reachable) and every
//! class it brings in (newly reachable). Outside the window a child is read as a tensor in memory
//! and a value read from outside is a result, the same in the before and after windows.
//!
//! When the window holds the whole selected DAG (graphs of up to [`WINDOW`] live classes) the
//! difference is exact, and the search makes exactly the moves the whole-DAG search made. On a
//! larger graph a kernel that reaches past the window's edge is costed as if it stopped there, so
//! a difference can be off; the caller re-costs the whole DAG after each round and undoes a round
//! that did not pay off, so the result is still never worse than the input.
//!
//! The cost model stays a black box ([`dag_cost`] on a [`Dag`]): the window has no knowledge of
//! its rules.

use crate::cost::{Cost, Dag, DagNode, INFINITY, Target, dag_cost};
use crate::lang::{EGraph, Head, Node};
use egg::Id;
use std::borrow::Cow;

/// The most classes a window's neighbourhood holds (the killed and born classes come on top).
pub const WINDOW: usize = 64;

/// How many classes the cycle check may visit before it gives up and rejects the move.
const CYCLE_BUDGET: usize = 8 * WINDOW;

pub(crate) const NONE: u32 = u32::MAX;

/// The spacing of the initial heights.
const GAP: u64 = 1 << 20;

/// The e-graph as extraction reads it, computed once: every class by id (egg's `eg[id]` hashes
/// the id: the search looks classes up millions of times on a large graph) and the distinct
/// canonical children of every node.
pub(crate) struct Kids<'a> {
    classes: Vec<Option<&'a EClass>>,
    /// Per class, where each of its nodes' children start in `buf` (one more entry than nodes).
    start: Vec<Vec<u32>>,
    buf: Vec<u32>,
}

pub(crate) type EClass = egg::EClass<Node, crate::lang::ClassData>;

impl<'a> Kids<'a> {
    pub fn new(eg: &'a EGraph, n: usize) -> Kids<'a> {
        let mut classes = vec![None; n];
        let mut start = vec![Vec::new(); n];
        let mut buf = Vec::new();
        for class in eg.classes() {
            classes[usize::from(class.id)] = Some(class);
            let s = &mut start[usize::from(class.id)];
            for node in &class.nodes {
                s.push(buf.len() as u32);
                let from = buf.len();
                for &ch in &node.children {
                    let k = canon(eg, ch);
                    if !buf[from..].contains(&k) {
                        buf.push(k);
                    }
                }
            }
            s.push(buf.len() as u32);
        }
        Kids {
            classes,
            start,
            buf,
        }
    }

    pub fn get(&self, c: u32, i: u32) -> &[u32] {
        if i == NONE {
            return &[];
        }
        let s = &self.start[c as usize];
        &self.buf[s[i as usize] as usize..s[i as usize + 1] as usize]
    }

    /// The canonical class `c`.
    pub fn class(&self, c: u32) -> &'a EClass {
        self.classes[c as usize].expect("a canonical class id")
    }
}

/// The search state: the selection and the selected DAG's structure.
pub(crate) struct Search<'a> {
    pub t: &'a Target,
    pub eg: &'a EGraph,
    table: &'a Kids<'a>,
    pub roots: Vec<u32>,
    pub sel: Vec<u32>,
    /// Distinct readers of each live class (within the selected DAG).
    readers: Vec<Vec<u32>>,
    live: Vec<bool>,
    root: Vec<bool>,
    /// A topological labelling: for every selected edge `x -> y`, `height[x] > height[y]`.
    /// Built [`GAP`] apart, so that a move raising a class's height rarely has to raise its
    /// readers' (which would cost the whole graph above it per move).
    height: Vec<u64>,
    /// Scratch markers, compared against `epoch`.
    mark: Vec<u32>,
    /// A judged move's born, newly read and dead classes.
    born: Marks,
    newly_read: Marks,
    dead: Marks,
    epoch: u32,
    scratch: std::cell::RefCell<Scratch>,
}

/// A class-indexed map to DAG positions, cleared in O(1) by bumping an epoch.
struct Scratch {
    slot: Vec<u32>,
    at: Vec<u32>,
    epoch: u32,
}

impl Scratch {
    fn index(&mut self) -> Index<'_> {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.at.iter_mut().for_each(|a| *a = 0);
            self.epoch = 1;
        }
        Index(self)
    }
}

struct Index<'s>(&'s mut Scratch);

impl Index<'_> {
    fn get(&self, c: u32) -> Option<usize> {
        (self.0.at[c as usize] == self.0.epoch).then(|| self.0.slot[c as usize] as usize)
    }
    fn set(&mut self, c: u32, i: usize) {
        self.0.at[c as usize] = self.0.epoch;
        self.0.slot[c as usize] = i as u32;
    }
}

/// A set of classes cleared in O(1) by bumping an epoch (a move's sets are small; the graph
/// is not).
struct Marks {
    at: Vec<u32>,
    epoch: u32,
}

impl Marks {
    fn new(n: usize) -> Marks {
        Marks {
            at: vec![0; n],
            epoch: 1,
        }
    }

    fn clear(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.at.iter_mut().for_each(|a| *a = 0);
            self.epoch = 1;
        }
    }

    /// Adds `c`; false if it was there.
    fn insert(&mut self, c: u32) -> bool {
        std::mem::replace(&mut self.at[c as usize], self.epoch) != self.epoch
    }

    fn contains(&self, c: u32) -> bool {
        self.at[c as usize] == self.epoch
    }
}

/// One move: the classes that change and the node index each takes.
pub(crate) type Move = [(u32, u32)];

/// What a move would do, as found by [`Search::judge`].
struct Effect {
    dead: Vec<u32>,
    born: Vec<u32>,
    delta: i128,
}

fn canon(eg: &EGraph, id: Id) -> u32 {
    usize::from(eg.find(id)) as u32
}

impl<'a> Search<'a> {
    pub fn new(
        t: &'a Target,
        eg: &'a EGraph,
        table: &'a Kids<'a>,
        roots: &[Id],
        sel: Vec<u32>,
    ) -> Search<'a> {
        let n = sel.len();
        let roots: Vec<u32> = roots.iter().map(|&r| canon(eg, r)).collect();
        let mut s = Search {
            t,
            eg,
            table,
            roots,
            sel,
            readers: vec![Vec::new(); n],
            live: vec![false; n],
            root: vec![false; n],
            height: vec![0; n],
            mark: vec![0; n],
            born: Marks::new(n),
            newly_read: Marks::new(n),
            dead: Marks::new(n),
            epoch: 0,
            scratch: std::cell::RefCell::new(Scratch {
                slot: vec![0; n],
                at: vec![0; n],
                epoch: 0,
            }),
        };
        s.rebuild();
        s
    }

    /// Recomputes readers, liveness and heights from the selection (`O(DAG)`).
    pub fn rebuild(&mut self) {
        let n = self.sel.len();
        self.readers = vec![Vec::new(); n];
        self.live = vec![false; n];
        self.root = vec![false; n];
        self.height = vec![0; n];
        for &r in &self.roots {
            self.root[r as usize] = true;
        }
        // Post-order over the selected DAG (iterative: deep graphs must not overflow).
        let mut done = vec![false; n];
        for &r in &self.roots.clone() {
            let mut stack = vec![(r, false)];
            while let Some((c, expanded)) = stack.pop() {
                if done[c as usize] {
                    continue;
                }
                let kids = self.kids(c, self.sel[c as usize]);
                if !expanded {
                    stack.push((c, true));
                    stack.extend(
                        kids.iter()
                            .filter(|&&k| !done[k as usize])
                            .map(|&k| (k, false)),
                    );
                    continue;
                }
                done[c as usize] = true;
                self.live[c as usize] = true;
                let mut h = 0;
                for &k in kids {
                    self.readers[k as usize].push(c);
                    h = h.max(self.height[k as usize] + GAP);
                }
                self.height[c as usize] = h;
            }
        }
    }

    pub fn node(&self, c: u32, i: u32) -> &'a Node {
        &self.table.class(c).nodes[i as usize]
    }

    /// The distinct canonical children of node `i` of class `c` (none for `NONE`).
    fn kids(&self, c: u32, i: u32) -> &'a [u32] {
        self.table.get(c, i)
    }

    pub fn is_live(&self, c: u32) -> bool {
        self.live[c as usize]
    }

    /// Live classes read by two or more live classes, with their readers (sorted by class).
    pub fn shared(&self) -> Vec<(u32, Vec<u32>)> {
        let mut v: Vec<(u32, Vec<u32>)> = (0..self.sel.len() as u32)
            .filter(|&c| self.live[c as usize] && !self.root[c as usize])
            .filter(|&c| self.readers[c as usize].len() >= 2)
            .map(|c| (c, self.readers[c as usize].clone()))
            .collect();
        v.sort();
        v
    }

    fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        self.epoch
    }

    /// The new node of class `c` under move `m`, else its current one.
    fn new_sel(&self, m: &Move, c: u32) -> u32 {
        m.iter()
            .find(|(k, _)| *k == c)
            .map_or(self.sel[c as usize], |&(_, i)| i)
    }

    /// How the whole-DAG cost would change under `m` (as seen through the window), or `None`
    /// if `m` would leave a hole or a cycle.
    pub fn delta(&mut self, m: &Move) -> Option<i128> {
        self.judge(m).map(|e| e.delta)
    }

    fn judge(&mut self, m: &Move) -> Option<Effect> {
        if m.iter().any(|&(c, _)| !self.live[c as usize]) {
            return None;
        }
        self.born.clear();
        self.newly_read.clear();
        self.dead.clear();
        // Classes newly reachable: walk the new children through classes not live now.
        let mut born: Vec<u32> = Vec::new();
        // What the changed and born classes read (alive after the move for sure).
        let mut stack: Vec<u32> = Vec::new();
        for &(c, i) in m {
            if i == NONE {
                return None;
            }
            for &k in self.kids(c, i) {
                self.newly_read.insert(k);
                stack.push(k);
            }
        }
        while let Some(x) = stack.pop() {
            if self.live[x as usize] || !self.born.insert(x) {
                continue;
            }
            let i = self.sel[x as usize];
            if i == NONE {
                return None;
            }
            born.push(x);
            for &k in self.kids(x, i) {
                self.newly_read.insert(k);
                stack.push(k);
            }
        }
        // Classes no longer reachable.
        let changed = |c: u32| m.iter().find(|(k, _)| *k == c).map(|&(_, i)| i);
        let mut dead: Vec<u32> = Vec::new();
        let mut suspects: Vec<u32> = m
            .iter()
            .flat_map(|&(c, _)| self.kids(c, self.sel[c as usize]).iter().copied())
            .collect();
        while let Some(x) = suspects.pop() {
            if !self.live[x as usize]
                || self.root[x as usize]
                || self.dead.contains(x)
                || self.newly_read.contains(x)
            {
                continue;
            }
            let read = self.readers[x as usize].iter().any(|&r| {
                !self.dead.contains(r)
                    && match changed(r) {
                        Some(i) => self.kids(r, i).contains(&x),
                        None => true,
                    }
            });
            if read {
                continue;
            }
            if changed(x).is_some() {
                return None; // a changed class dies: not a move the search makes
            }
            self.dead.insert(x);
            dead.push(x);
            suspects.extend_from_slice(self.kids(x, self.sel[x as usize]));
        }
        if self.cycles(m) {
            return None;
        }
        // The window: a breadth-first neighbourhood of the changed classes.
        let ep = self.next_epoch();
        let mut window: Vec<u32> = Vec::new();
        for &(c, _) in m {
            if self.mark[c as usize] != ep {
                self.mark[c as usize] = ep;
                window.push(c);
            }
        }
        let mut head = 0;
        while head < window.len() && window.len() < WINDOW {
            let c = window[head];
            head += 1;
            // Children, then readers; a class read by every layer (a shared constant) has
            // thousands of readers, so they are taken only while there is room.
            for &k in self.kids(c, self.sel[c as usize]) {
                if window.len() < WINDOW && self.mark[k as usize] != ep {
                    self.mark[k as usize] = ep;
                    window.push(k);
                }
            }
            for j in 0..self.readers[c as usize].len() {
                if window.len() >= WINDOW {
                    break;
                }
                let k = self.readers[c as usize][j];
                if self.mark[k as usize] != ep {
                    self.mark[k as usize] = ep;
                    window.push(k);
                }
            }
        }
        let in_old = |s: &Search, x: u32| s.mark[x as usize] == ep || s.dead.contains(x);
        let in_new = |s: &Search, x: u32| {
            (s.mark[x as usize] == ep && !s.dead.contains(x)) || s.born.contains(x)
        };
        let mut old_set: Vec<u32> = window.clone();
        old_set.extend(
            dead.iter()
                .copied()
                .filter(|&d| self.mark[d as usize] != ep),
        );
        let mut new_set: Vec<u32> = window
            .iter()
            .copied()
            .filter(|&x| !self.dead.contains(x))
            .collect();
        new_set.extend(born.iter().copied());
        let before = self.window_cost(
            &old_set,
            &|s, c| s.sel[c as usize],
            &|x| in_old(self, x),
            &|r| !in_old(self, r),
        );
        let after = self.window_cost(
            &new_set,
            &|s, c| s.new_sel(m, c),
            &|x| in_new(self, x),
            &|r| !in_new(self, r) && !self.dead.contains(r),
        );
        if after == INFINITY {
            return None;
        }
        Some(Effect {
            dead,
            born,
            delta: after as i128 - before as i128,
        })
    }

    /// Whether move `m` closes a cycle. A new cycle runs through a changed class or a class the
    /// move brings in; below the lowest changed class (by height) the selected DAG is unchanged
    /// and acyclic, so the depth-first search stops there.
    fn cycles(&self, m: &Move) -> bool {
        use std::collections::HashMap;
        let floor = m
            .iter()
            .map(|&(c, _)| self.height[c as usize])
            .min()
            .unwrap_or(0);
        // 1 = on the path, 2 = finished.
        let mut state: HashMap<u32, u8> = HashMap::new();
        let mut visited = 0usize;
        for &(c, _) in m {
            let mut stack = vec![(c, false)];
            while let Some((x, expanded)) = stack.pop() {
                if expanded {
                    state.insert(x, 2);
                    continue;
                }
                match state.get(&x) {
                    Some(2) => continue,
                    Some(_) => return true,
                    None => {}
                }
                let changed = m.iter().any(|&(k, _)| k == x);
                if !changed && !self.born.contains(x) && self.height[x as usize] <= floor {
                    state.insert(x, 2);
                    continue;
                }
                visited += 1;
                if visited > CYCLE_BUDGET {
                    return true; // too far to tell: reject the move
                }
                state.insert(x, 1);
                stack.push((x, true));
                for &k in self.kids(x, self.new_sel(m, x)) {
                    match state.get(&k) {
                        Some(1) => return true,
                        Some(2) => {}
                        _ => stack.push((k, false)),
                    }
                }
            }
        }
        false
    }

    /// [`dag_cost`] of the classes `set` under the selection `pick`: children outside the set are
    /// tensors in memory; a class that is a root or has a reader for which `outside_reader`
    /// holds is a result.
    fn window_cost(
        &self,
        set: &[u32],
        pick: &dyn Fn(&Search, u32) -> u32,
        inside: &dyn Fn(u32) -> bool,
        outside_reader: &dyn Fn(u32) -> bool,
    ) -> Cost {
        let mut scratch = self.scratch.borrow_mut();
        let mut index = scratch.index();
        let mut d = Dag::default();
        // Post-order within the set, so children come first.
        let mut order: Vec<u32> = set.to_vec();
        order.sort_by_key(|&c| (self.height[c as usize], c));
        for &start in &order {
            let mut stack = vec![(start, false)];
            while let Some((c, expanded)) = stack.pop() {
                if index.get(c).is_some() {
                    continue;
                }
                let i = pick(self, c);
                let kids = self.kids(c, i);
                if !expanded {
                    stack.push((c, true));
                    for &k in kids.iter().rev() {
                        if index.get(k).is_none() {
                            if inside(k) {
                                stack.push((k, false));
                            } else {
                                index.set(k, d.nodes.len());
                                d.nodes.push(self.boundary(k));
                            }
                        }
                    }
                    continue;
                }
                let node = self.node(c, i);
                let children = node
                    .children
                    .iter()
                    .map(|&ch| index.get(canon(self.eg, ch)))
                    .collect::<Option<Vec<_>>>();
                let Some(children) = children else {
                    return INFINITY; // a cycle inside the window
                };
                index.set(c, d.nodes.len());
                d.nodes.push(DagNode {
                    node: Cow::Borrowed(node),
                    ty: self.table.class(c).data.ty.as_ref(),
                    children,
                });
            }
        }
        for &c in set {
            if self.root[c as usize] || self.readers[c as usize].iter().any(|&r| outside_reader(r))
            {
                d.results.extend(index.get(c));
            }
        }
        dag_cost(self.t, &d)
    }

    /// A class outside the window, as the window reads it: a tensor in memory.
    fn boundary(&self, c: u32) -> DagNode<'a> {
        static OUTSIDE: Node = Node {
            head: Head::Param(u32::MAX),
            attrs: vec![],
            written_ty: None,
            children: vec![],
        };
        DagNode {
            node: Cow::Borrowed(&OUTSIDE),
            ty: self.table.class(c).data.ty.as_ref(),
            children: vec![],
        }
    }

    /// Makes move `m` if the window says it pays; returns the estimated gain.
    pub fn try_move(&mut self, m: &Move) -> Option<i128> {
        let e = self.judge(m)?;
        if e.delta >= 0 {
            return None;
        }
        self.apply(m, &e);
        Some(-e.delta)
    }

    fn apply(&mut self, m: &Move, e: &Effect) {
        for &(c, i) in m {
            for &k in self.kids(c, self.sel[c as usize]) {
                self.readers[k as usize].retain(|&r| r != c);
            }
            self.sel[c as usize] = i;
        }
        for &d in &e.dead {
            self.live[d as usize] = false;
            for &k in self.kids(d, self.sel[d as usize]) {
                self.readers[k as usize].retain(|&r| r != d);
            }
        }
        for &d in &e.dead {
            self.readers[d as usize].clear();
        }
        for &b in &e.born {
            self.live[b as usize] = true;
        }
        for &b in &e.born {
            for &k in self.kids(b, self.sel[b as usize]) {
                self.readers[k as usize].push(b);
            }
        }
        // A born class gets the least height above its children (born classes first, in as
        // many sweeps as the longest born chain).
        for &b in &e.born {
            self.height[b as usize] = 0;
        }
        for _ in 0..e.born.len() {
            let mut changed = false;
            for &b in &e.born {
                let h = self.least_height(b);
                if h != self.height[b as usize] {
                    self.height[b as usize] = h;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut raised: Vec<u32> = Vec::new();
        for &(c, i) in m {
            for &k in self.kids(c, i) {
                if !self.readers[k as usize].contains(&c) {
                    self.readers[k as usize].push(c);
                }
            }
            raised.push(c);
        }
        // Restore `height[x] > height[child]` upward from every class whose children changed.
        while let Some(x) = raised.pop() {
            let h = self.least_height(x);
            if h > self.height[x as usize] {
                self.height[x as usize] = h;
                raised.extend(self.readers[x as usize].iter().copied());
            }
        }
    }

    /// The least height above the children of `x`'s chosen node.
    fn least_height(&self, x: u32) -> u64 {
        self.kids(x, self.sel[x as usize])
            .iter()
            .map(|&k| self.height[k as usize] + 1)
            .max()
            .unwrap_or(0)
    }
}
