//! `Einsum` against a direct definition (every assignment of the labels, summed) on common
//! forms: attention's two products, batched matmul with a broadcast ellipsis, three operands,
//! implicit outputs, sums, outer products and diagonals (a label repeated in one operand).

mod common;
use common::{FLOAT, f32s, model, node, value};
use irc_onnx::proto::AttributeProto;
use std::collections::BTreeMap;

/// The reference: out[o] = Σ over the other labels of Π operands (no ellipsis).
fn reference(eq: &str, shapes: &[Vec<u64>], data: &[Vec<f32>]) -> (Vec<u64>, Vec<f64>) {
    let (lhs, out) = eq.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let mut size = BTreeMap::new();
    for (t, s) in terms.iter().zip(shapes) {
        for (c, &d) in t.iter().zip(s) {
            let e = size.entry(*c).or_insert(d);
            *e = (*e).max(d);
        }
    }
    let out: Vec<char> = out.chars().collect();
    let labels: Vec<char> = size.keys().copied().collect();
    let oshape: Vec<u64> = out.iter().map(|c| size[c]).collect();
    let mut res = vec![0.0; oshape.iter().product::<u64>() as usize];
    let total: u64 = labels.iter().map(|c| size[c]).product();
    for k in 0..total {
        let mut rem = k;
        let mut at = BTreeMap::new();
        for c in labels.iter().rev() {
            at.insert(*c, rem % size[c]);
            rem /= size[c];
        }
        let flat = |t: &[char], s: &[u64]| -> usize {
            t.iter().zip(s).fold(0u64, |acc, (c, &d)| {
                acc * d + if d == 1 { 0 } else { at[c] }
            }) as usize
        };
        let p: f64 = terms
            .iter()
            .zip(shapes)
            .zip(data)
            .map(|((t, s), x)| x[flat(t, s)] as f64)
            .product();
        res[flat(&out, &oshape)] += p;
    }
    (oshape, res)
}

fn run(eq: &str, shapes: &[Vec<u64>], out_shape: &[u64]) -> Result<(), String> {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let ins: Vec<&str> = names.iter().map(String::as_str).collect();
    let attr = AttributeProto {
        name: "equation".into(),
        s: eq.as_bytes().to_vec(),
        r#type: 3,
        ..Default::default()
    };
    let m = model(
        vec![node("Einsum", &ins, &["y"], vec![attr])],
        names
            .iter()
            .zip(shapes)
            .map(|(n, s)| value(n, FLOAT, s))
            .collect(),
        vec![value("y", FLOAT, out_shape)],
    );
    let data: Vec<Vec<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n: u64 = s.iter().product();
            (0..n)
                .map(|k| ((k * 7 + i as u64 * 3) % 11) as f32 * 0.25 - 1.0)
                .collect()
        })
        .collect();
    let inputs = shapes
        .iter()
        .zip(&data)
        .map(|(s, d)| f32s(s, d.clone()))
        .collect();
    let got = common::run(&m, inputs)?;
    let explicit = explicit_form(eq, shapes);
    let (oshape, want) = reference(&explicit, shapes, &data);
    assert_eq!(oshape, out_shape, "{eq}");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{eq}: element {k}: {g} vs {w}"
        );
    }
    assert_eq!(got.len(), want.len(), "{eq}");
    Ok(())
}

/// The equation with its ellipsis written as the labels `Z Y X ...` (aligned from the right)
/// and an implicit output made explicit, for the reference.
fn explicit_form(eq: &str, shapes: &[Vec<u64>]) -> String {
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.to_string(), None),
    };
    let dots_of = |t: &str, rank: usize| rank + 3 - t.len();
    let mut max_dots = 0;
    let terms: Vec<String> = lhs
        .split(',')
        .zip(shapes)
        .map(|(t, s)| {
            if t.contains("...") {
                let k = dots_of(t, s.len());
                max_dots = max_dots.max(k);
                let e: String = (0..k).rev().map(|i| (b'Z' - i as u8) as char).collect();
                t.replace("...", &e)
            } else {
                t.to_string()
            }
        })
        .collect();
    let ell: String = (0..max_dots)
        .rev()
        .map(|i| (b'Z' - i as u8) as char)
        .collect();
    let out = match rhs {
        Some(r) => r.replace("...", &ell),
        None => {
            let all: String = terms.concat();
            let mut once: Vec<char> = all
                .chars()
                .filter(|c| c.is_ascii_lowercase() && all.matches(*c).count() == 1)
                .collect();
            once.sort();
            ell.clone() + &once.into_iter().collect::<String>()
        }
    };
    format!("{}->{out}", terms.join(","))
}

/// An equation, its operands' shapes and the output's shape.
type Case = (&'static str, Vec<Vec<u64>>, Vec<u64>);

#[test]
fn common_forms_match_the_definition() {
    let v = |s: &[u64]| s.to_vec();
    let cases: Vec<Case> = vec![
        (
            "bhid,bhjd->bhij",
            vec![v(&[2, 3, 4, 5]), v(&[2, 3, 6, 5])],
            v(&[2, 3, 4, 6]),
        ),
        (
            "bhij,bhjd->bhid",
            vec![v(&[2, 3, 4, 6]), v(&[2, 3, 6, 5])],
            v(&[2, 3, 4, 5]),
        ),
        (
            "...ij,...jk->...ik",
            vec![v(&[2, 1, 3, 4]), v(&[5, 4, 2])],
            v(&[2, 5, 3, 2]),
        ),
        (
            "ij,jk,kl->il",
            vec![v(&[2, 3]), v(&[3, 4]), v(&[4, 5])],
            v(&[2, 5]),
        ),
        ("ij,jk", vec![v(&[3, 4]), v(&[4, 2])], v(&[3, 2])),
        ("i,j->ij", vec![v(&[3]), v(&[4])], v(&[3, 4])),
        ("bij->jb", vec![v(&[2, 3, 4])], v(&[4, 2])),
        ("ijk->", vec![v(&[2, 3, 4])], v(&[])),
        ("ij,kj->ik", vec![v(&[3, 5]), v(&[4, 5])], v(&[3, 4])),
        (
            "bnd,dk->bnk",
            vec![v(&[2, 3, 4]), v(&[4, 6])],
            v(&[2, 3, 6]),
        ),
        ("abc,cd->a", vec![v(&[2, 3, 4]), v(&[4, 5])], v(&[2])),
    ];
    for (eq, shapes, out) in cases {
        run(eq, &shapes, &out).unwrap_or_else(|e| panic!("{eq}: {e}"));
    }
}

/// A label repeated within one operand takes its diagonal (a strided slice of the merged
/// axes), before any contraction.
#[test]
fn diagonals_match_the_definition() {
    let v = |s: &[u64]| s.to_vec();
    let cases: Vec<Case> = vec![
        ("ii->i", vec![v(&[4, 4])], v(&[4])),
        ("ii->", vec![v(&[3, 3])], v(&[])),
        ("ii", vec![v(&[5, 5])], v(&[])),
        ("bii->bi", vec![v(&[2, 3, 3])], v(&[2, 3])),
        ("...ii->...i", vec![v(&[2, 3, 4, 4])], v(&[2, 3, 4])),
        ("iji->ji", vec![v(&[3, 2, 3])], v(&[2, 3])),
        ("iii->i", vec![v(&[3, 3, 3])], v(&[3])),
        ("iijj->ij", vec![v(&[2, 2, 3, 3])], v(&[2, 3])),
        ("iij,jk->ik", vec![v(&[3, 3, 4]), v(&[4, 2])], v(&[3, 2])),
        ("ij,jj->i", vec![v(&[2, 4]), v(&[4, 4])], v(&[2])),
        ("i,ii->i", vec![v(&[1]), v(&[1, 1])], v(&[1])),
    ];
    for (eq, shapes, out) in cases {
        run(eq, &shapes, &out).unwrap_or_else(|e| panic!("{eq}: {e}"));
    }
}

#[test]
fn a_diagonal_of_unequal_sizes_is_an_error() {
    let e = run("ii->i", &[vec![3, 4]], &[3]).unwrap_err();
    assert!(e.contains("a diagonal needs equal sizes"), "{e}");
}
