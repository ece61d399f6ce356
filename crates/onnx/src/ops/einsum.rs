//! ONNX `Einsum` as irc ops: each operand's labels that no later operand and no output use are
//! summed away (`reduce_sum`), then operands are contracted pairwise, left to right, as one
//! batched `matmul` each (transposed to `[batch, free, contracted]` and `[batch, contracted,
//! free]`, reshaped to 3 groups of dims), and the result is transposed to the output's order.
//! An ellipsis stands for the leading dims of its operand (aligned from the right, broadcast
//! where one side has size 1). A label repeated within one operand takes that operand's
//! diagonal first: the two axes moved last and merged into one of size n·n, then a slice with
//! step n + 1 (a view whose stride is the sum of the two axes' strides, as `torch.diagonal`'s).

use super::Node;
use super::math::{one, reduce, reshape_to};
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attrs, OpKind, ints};

/// A dim's label: a letter, or the `k`-th dim of the ellipsis counted from its end.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    Ellipsis(usize),
    Letter(char),
}

/// One term of the equation: its labels in order, with the ellipsis expanded to `dots` dims.
fn parse_term(term: &str, rank: Option<usize>) -> R<Vec<Label>> {
    let (head, tail, has_dots) = match term.split_once("...") {
        Some((h, t)) => (h, t, true),
        None => (term, "", false),
    };
    let letters = |s: &str| -> R<Vec<Label>> {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    Ok(Label::Letter(c))
                } else {
                    Err(format!(
                        "'{c}' in the equation is not a label (letters a-z, A-Z)"
                    ))
                }
            })
            .collect()
    };
    let (h, t) = (letters(head)?, letters(tail)?);
    if !has_dots {
        return Ok(h);
    }
    let named = h.len() + t.len();
    let dots = match rank {
        Some(r) if r >= named => r - named,
        Some(r) => {
            return Err(format!(
                "term '{term}' names {named} dims but its operand has rank {r}"
            ));
        }
        None => 0,
    };
    let mut out = h;
    out.extend((0..dots).rev().map(Label::Ellipsis));
    out.extend(t);
    Ok(out)
}

/// An operand being contracted: its value and the label of each dim.
struct Term {
    v: Val,
    labels: Vec<Label>,
}

pub fn einsum(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let eq: String = n
        .string("equation")
        .ok_or("the equation attribute is required")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let specs: Vec<&str> = lhs.split(',').collect();
    if specs.len() != n.n_in() {
        return Err(format!(
            "the equation has {} operand terms, the node {} inputs",
            specs.len(),
            n.n_in()
        ));
    }
    let mut terms = Vec::new();
    // Every label as written (a repeated one as often as it is written), for the implicit
    // output.
    let mut written: Vec<Label> = Vec::new();
    let mut dots = 0;
    for (i, s) in specs.iter().enumerate() {
        let v = n.x(i)?;
        let rank = cx.ty(&v).rank();
        let labels = parse_term(s, Some(rank))?;
        if labels.len() != rank {
            return Err(format!(
                "term '{s}' has {} labels for rank {rank}",
                labels.len()
            ));
        }
        dots = dots.max(
            labels
                .iter()
                .filter(|l| matches!(l, Label::Ellipsis(_)))
                .count(),
        );
        written.extend(labels.iter().copied());
        terms.push(diagonal(cx, Term { v, labels }, s)?);
    }
    let out: Vec<Label> = match &rhs {
        Some(r) => {
            // Without an ellipsis in the output, the ellipsis dims are summed.
            let rank = r.contains("...").then(|| dots + r.len() - 3);
            parse_term(r, rank)?
        }
        None => {
            // Implicit output: the ellipsis, then the letters used once, alphabetically.
            let mut o: Vec<Label> = (0..dots).rev().map(Label::Ellipsis).collect();
            let mut letters: Vec<char> = written
                .iter()
                .filter_map(|l| match l {
                    Label::Letter(c) => Some(*c),
                    Label::Ellipsis(_) => None,
                })
                .collect();
            letters.sort();
            let once: Vec<char> = letters
                .iter()
                .copied()
                .filter(|c| letters.iter().filter(|d| *d == c).count() == 1)
                .collect();
            o.extend(once.into_iter().map(Label::Letter));
            o
        }
    };
    for l in &out {
        if !terms.iter().any(|t| t.labels.contains(l)) {
            return Err(format!("output label {l:?} is in no operand"));
        }
    }
    // Left to right; before each contraction, an operand's labels that neither the output,
    // the other side nor a later operand use are summed away.
    let mut acc: Option<Term> = None;
    let mut rest: Vec<Term> = terms;
    rest.reverse();
    while let Some(t) = rest.pop() {
        let mut keep = out.clone();
        keep.extend(rest.iter().flat_map(|r| r.labels.iter().copied()));
        acc = Some(match acc {
            None => sum_unused(cx, t, &keep, None)?,
            Some(a) => {
                let a = sum_unused(cx, a, &keep, Some(&t))?;
                let t = sum_unused(cx, t, &keep, Some(&a))?;
                contract(cx, a, t, &keep)?
            }
        });
    }
    let acc = acc.ok_or("Einsum needs at least one operand")?;
    let acc = sum_unused(cx, acc, &out, None)?;
    let perm: Vec<i64> = out
        .iter()
        .map(|l| acc.labels.iter().position(|m| m == l).unwrap_or(0) as i64)
        .collect();
    if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
        return one(acc.v);
    }
    one(cx.op(
        OpKind::Transpose,
        &[&acc.v],
        Attrs::new().with("perm", ints(&perm)),
    )?)
}

/// `t` with each label it repeats taken once: the diagonal over those axes. For a label at
/// axes i < j (equal sizes n), the other axes keep their order, i and j go last and merge into
/// one axis of n·n elements, and a slice with step n + 1 picks the n elements where both
/// indices agree; the label then labels the last axis. Repeated until no label repeats.
fn diagonal(cx: &mut Ctx, mut t: Term, term: &str) -> R<Term> {
    loop {
        let pair = (0..t.labels.len()).find_map(|i| {
            (i + 1..t.labels.len())
                .find(|&j| t.labels[j] == t.labels[i])
                .map(|j| (i, j))
        });
        let Some((i, j)) = pair else {
            return Ok(t);
        };
        let shape = cx.ty(&t.v).shape;
        let n = shape[i];
        if shape[j] != n {
            return Err(format!(
                "term '{term}' repeats label {:?} over axes of sizes {n} and {} (a diagonal needs equal sizes)",
                t.labels[i], shape[j]
            ));
        }
        let others: Vec<usize> = (0..t.labels.len()).filter(|&a| a != i && a != j).collect();
        let perm: Vec<i64> = others.iter().chain([&i, &j]).map(|&a| a as i64).collect();
        let mut v = t.v;
        if perm.iter().enumerate().any(|(k, &p)| k as i64 != p) {
            v = cx.op(
                OpKind::Transpose,
                &[&v],
                Attrs::new().with("perm", ints(&perm)),
            )?;
        }
        let mut merged: Vec<u64> = others.iter().map(|&a| shape[a]).collect();
        merged.push(n * n);
        let flat = reshape_to(cx, &v, &merged)?;
        let last = merged.len() as i64 - 1;
        let attrs = Attrs::new()
            .with("axes", ints(&[last]))
            .with("starts", ints(&[0]))
            .with("ends", ints(&[(n * n) as i64]))
            .with("steps", ints(&[n as i64 + 1]));
        let v = cx.op(OpKind::Slice, &[&flat], attrs)?;
        let label = t.labels[i];
        let mut labels: Vec<Label> = others.iter().map(|&a| t.labels[a]).collect();
        labels.push(label);
        t = Term { v, labels };
    }
}

/// Sums the dims of `t` whose labels are neither kept (`keep`) nor in `other`.
fn sum_unused(cx: &mut Ctx, t: Term, keep: &[Label], other: Option<&Term>) -> R<Term> {
    let used = |l: &Label| keep.contains(l) || other.is_some_and(|o| o.labels.contains(l));
    let axes: Vec<i64> = (0..t.labels.len())
        .filter(|&i| !used(&t.labels[i]))
        .map(|i| i as i64)
        .collect();
    if axes.is_empty() {
        return Ok(t);
    }
    let v = reduce(cx, OpKind::ReduceSum, &t.v, &axes, false)?;
    let labels = t.labels.into_iter().filter(|l| used(l)).collect();
    Ok(Term { v, labels })
}

/// `a` and `b` contracted over their shared labels not in `keep`, as one batched matmul; the
/// result's labels are the batch labels, then `a`'s free ones, then `b`'s.
fn contract(cx: &mut Ctx, a: Term, b: Term, keep: &[Label]) -> R<Term> {
    // Each label's size; a shared label of size 1 on one side broadcasts (an ellipsis dim).
    let mut size: Vec<(Label, u64)> = Vec::new();
    for t in [&a, &b] {
        let shape = cx.ty(&t.v).shape;
        for (l, &d) in t.labels.iter().zip(&shape) {
            match size.iter_mut().find(|(m, _)| m == l) {
                Some((_, s)) if *s == d || d == 1 => {}
                Some((_, s)) if *s == 1 => *s = d,
                Some((_, s)) => {
                    return Err(format!(
                        "label {l:?} has size {s} in one operand and {d} in the other"
                    ));
                }
                None => size.push((*l, d)),
            }
        }
    }
    let size_of = |l: &Label| size.iter().find(|(m, _)| m == l).map_or(1, |(_, d)| *d);
    let shared: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l))
        .collect();
    let batch: Vec<Label> = shared
        .iter()
        .copied()
        .filter(|l| keep.contains(l))
        .collect();
    let inner: Vec<Label> = shared
        .iter()
        .copied()
        .filter(|l| !keep.contains(l))
        .collect();
    let free_a: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !shared.contains(l))
        .collect();
    let free_b: Vec<Label> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !shared.contains(l))
        .collect();
    // Transposed to the groups' order, broadcast to the full sizes, one dim per group.
    let mut arrange = |t: Term, groups: [&[Label]; 3]| -> R<Val> {
        let want: Vec<Label> = groups.iter().flat_map(|g| g.iter().copied()).collect();
        let perm: Vec<i64> = want
            .iter()
            .map(|l| t.labels.iter().position(|m| m == l).unwrap_or(0) as i64)
            .collect();
        let mut v = t.v;
        if perm.iter().enumerate().any(|(i, &p)| i as i64 != p) {
            let attrs = Attrs::new().with("perm", ints(&perm));
            v = cx.op(OpKind::Transpose, &[&v], attrs)?;
        }
        let full: Vec<i64> = want.iter().map(|l| size_of(l) as i64).collect();
        if cx
            .ty(&v)
            .shape
            .iter()
            .map(|&d| d as i64)
            .collect::<Vec<_>>()
            != full
        {
            let attrs = Attrs::new().with("shape", ints(&full));
            v = cx.op(OpKind::Broadcast, &[&v], attrs)?;
        }
        let grouped: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(size_of).product())
            .collect();
        reshape_to(cx, &v, &grouped)
    };
    let va = arrange(a, [&batch, &free_a, &inner])?;
    let vb = arrange(b, [&batch, &inner, &free_b])?;
    let m = cx.op(OpKind::Matmul, &[&va, &vb], Attrs::new())?;
    let labels: Vec<Label> = batch
        .iter()
        .chain(&free_a)
        .chain(&free_b)
        .copied()
        .collect();
    let shape: Vec<u64> = labels.iter().map(size_of).collect();
    let v = reshape_to(cx, &m, &shape)?;
    Ok(Term { v, labels })
}
