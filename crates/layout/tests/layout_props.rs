//! Post-condition property tests of the layout algebra, over the whole domain of each result.
//!
//! Layouts come from the seeded generator in `common` (admissible by construction: shapes are
//! powers of two unless stated, strides are a permuted compact order with gaps); proptest drives
//! the seeds. Each property is the `@post` line of the function it tests.

mod common;

use std::collections::BTreeSet;

use common::{Gen, Rng, layout};
use irc_layout::{
    Layout, Swizzle, Tiler, blocked_product, coalesce, complement, composition, eval_expr, filter,
    flat_divide, left_inverse, logical_divide, logical_product, parse_layout, raked_product,
    right_inverse, tiled_divide, zipped_divide, zipped_product,
};
use proptest::prelude::*;

const ANY: Gen = Gen {
    leaves: 4,
    odd: true,
    zero: true,
    gaps: true,
};
const INJECTIVE: Gen = Gen {
    leaves: 4,
    odd: true,
    zero: false,
    gaps: true,
};
const POW2: Gen = Gen::POW2;

fn random(seed: u64, g: Gen) -> Layout {
    parse_layout(&layout(&mut Rng::new(seed), g)).expect("generated layouts parse")
}

fn images(l: &Layout) -> Vec<i64> {
    l.images().expect("small layouts evaluate")
}

fn image_set(l: &Layout) -> BTreeSet<i64> {
    images(l).into_iter().collect()
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn text_round_trips(seed: u64) {
        let l = random(seed, ANY);
        prop_assert_eq!(parse_layout(&l.to_string()).unwrap(), l);
    }

    #[test]
    fn idx2crd_inverts_crd2idx(seed: u64) {
        let l = random(seed, ANY);
        for i in 0..l.size().unwrap() {
            let crd = l.idx2crd(i).unwrap();
            prop_assert!(crd.congruent(l.shape()));
            prop_assert_eq!(l.crd2idx(&crd).unwrap(), l.eval(i).unwrap());
        }
    }

    #[test]
    fn coalesce_keeps_the_function(seed: u64) {
        let l = random(seed, ANY);
        let c = coalesce(&l).unwrap();
        prop_assert!(c.depth() <= 1);
        prop_assert_eq!(images(&c), images(&l));
    }

    #[test]
    fn filter_keeps_the_image_set(seed: u64) {
        let l = random(seed, ANY);
        let f = filter(&l).unwrap();
        prop_assert!(f.leaves().iter().all(|&(s, d)| d != 0 || s == 1));
        prop_assert_eq!(image_set(&f), image_set(&l));
    }

    #[test]
    fn composition_is_function_composition(sa: u64, sb: u64) {
        let (a, b) = (random(sa, POW2), random(sb, Gen { leaves: 2, ..POW2 }));
        let r = composition(&a, &b).unwrap();
        prop_assert_eq!(r.size().unwrap(), b.size().unwrap());
        if b.shape().is_tuple() {
            prop_assert_eq!(r.rank(), b.rank());
        }
        for i in 0..b.size().unwrap() {
            let bi = b.eval(i).unwrap();
            if bi < a.size().unwrap() {
                prop_assert_eq!(r.eval(i).unwrap(), a.eval(bi).unwrap(), "i = {}", i);
            }
        }
    }

    #[test]
    fn complement_is_disjoint_ordered_and_covers(seed: u64, k in 1i64..4) {
        let l = random(seed, INJECTIVE);
        let cotarget = l.cosize().unwrap() * k;
        let c = complement(&l, cotarget).unwrap();
        let (ls, cs) = (image_set(&l), images(&c));
        prop_assert!(cs.windows(2).all(|w| w[0] < w[1]), "ordered: {}", c);
        prop_assert!(cs.iter().skip(1).all(|x| !ls.contains(x)), "disjoint: {}", c);
        prop_assert!(c.size().unwrap() * filter(&l).unwrap().size().unwrap() >= cotarget);
        let both = Layout::concat(&[l.clone(), c.clone()]).unwrap();
        let all = images(&filter(&both).unwrap());
        prop_assert_eq!(sorted(all.clone()), (0..all.len() as i64).collect::<Vec<_>>(), "bijection: {}", both);
    }

    #[test]
    fn right_inverse_is_a_right_inverse(seed: u64) {
        let l = random(seed, INJECTIVE);
        let r = right_inverse(&l).unwrap();
        for i in 0..r.size().unwrap() {
            prop_assert_eq!(l.eval(r.eval(i).unwrap()).unwrap(), i);
        }
    }

    #[test]
    fn left_inverse_is_a_left_inverse(seed: u64) {
        let l = random(seed, INJECTIVE);
        let r = left_inverse(&l).unwrap();
        for i in 0..l.size().unwrap() {
            prop_assert_eq!(r.eval(l.eval(i).unwrap()).unwrap(), i);
        }
    }

    #[test]
    fn logical_divide_is_composition_with_the_tile_and_its_complement(sa: u64, sb: u64) {
        let (a, b) = (random(sa, POW2), random(sb, Gen { leaves: 2, gaps: false, ..POW2 }));
        prop_assume!(b.cosize().unwrap() <= a.size().unwrap());
        let d = logical_divide(&a, &Tiler::Layout(b.clone())).unwrap();
        prop_assert_eq!(d.rank(), 2);
        prop_assert_eq!(d.size().unwrap(), a.size().unwrap());
        let tile = d.mode(0).unwrap();
        prop_assert_eq!(images(&tile), b.images().unwrap().iter().map(|&j| a.eval(j).unwrap()).collect::<Vec<_>>());
        // Regrouping keeps the multiset of images.
        let all = sorted(images(&d));
        for other in [zipped_divide, tiled_divide, flat_divide] {
            prop_assert_eq!(sorted(images(&other(&a, &Tiler::Layout(b.clone())).unwrap())), all.clone());
        }
    }

    #[test]
    fn by_mode_divide_keeps_the_mode_structure(sa: u64, sb: u64, sc: u64) {
        let a = random(sa, POW2);
        prop_assume!(a.rank() >= 2);
        let t = Tiler::Modes(vec![Tiler::Layout(random(sb, Gen { leaves: 1, gaps: false, ..POW2 })), Tiler::Layout(random(sc, Gen { leaves: 1, gaps: false, ..POW2 }))]);
        let d = logical_divide(&a, &t).unwrap();
        prop_assert_eq!(d.rank(), a.rank());
        let z = zipped_divide(&a, &t).unwrap();
        prop_assert_eq!(z.rank(), 2);
        prop_assert_eq!(z.mode(0).unwrap().rank(), 2);
        prop_assert_eq!(z.mode(1).unwrap().rank(), a.rank());
        prop_assert_eq!(sorted(images(&z)), sorted(images(&d)));
    }

    #[test]
    fn logical_product_reproduces_the_block(sa: u64, sb: u64) {
        let (a, b) = (random(sa, INJECTIVE), random(sb, Gen { leaves: 2, ..POW2 }));
        let p = logical_product(&a, &Tiler::Layout(b.clone())).unwrap();
        prop_assert_eq!(p.rank(), 2);
        prop_assert_eq!(p.mode(0).unwrap(), a.clone());
        prop_assert_eq!(p.size().unwrap(), a.size().unwrap() * b.size().unwrap());
        // Each copy of the block is offset by an image of B's layout over the complement.
        let rest = p.mode(1).unwrap();
        if b.shape().is_tuple() {
            prop_assert_eq!(rest.rank(), b.rank());
        }
        let zipped = zipped_product(&a, &Tiler::Layout(b.clone())).unwrap();
        prop_assert_eq!(sorted(images(&zipped)), sorted(images(&p)));
    }

    #[test]
    fn blocked_and_raked_products_regroup_the_logical_product(sa: u64, sb: u64) {
        let (a, b) = (random(sa, Gen { leaves: 3, ..INJECTIVE }), random(sb, Gen { leaves: 3, ..POW2 }));
        let p = sorted(images(&logical_product(&a, &Tiler::Layout(b.clone())).unwrap()));
        for r in [blocked_product(&a, &b).unwrap(), raked_product(&a, &b).unwrap()] {
            prop_assert_eq!(r.rank(), a.rank().max(b.rank()));
            prop_assert_eq!(sorted(images(&r)), p.clone());
        }
    }

    #[test]
    fn swizzles_are_involutions_permuting_each_period(b in 0i64..4, m in 0i64..4, extra in 0i64..3, seed: u64) {
        let s = Swizzle::new(b, m, b + extra).unwrap();
        let base = (seed % 16) as i64 * s.period();
        let block: Vec<i64> = (base..base + s.period()).collect();
        let moved: Vec<i64> = block.iter().map(|&x| s.apply(x)).collect();
        prop_assert_eq!(sorted(moved.clone()), block.clone());
        prop_assert!(moved.iter().zip(&block).all(|(&y, &x)| s.apply(y) == x));
    }

    #[test]
    fn eval_expr_never_panics(src in "[-0-9a-z_(),:\\[\\]<>oSw ]{0,40}") {
        let _ = eval_expr(&src);
    }

    #[test]
    fn eval_expr_never_panics_on_near_miss_layouts(seed: u64, cut in 0usize..40, big in prop::sample::select(vec!["0", "-1", "4611686018427387904", "9223372036854775807"])) {
        let text = layout(&mut Rng::new(seed), ANY);
        let cut = cut.min(text.len());
        for src in [format!("coalesce({})", &text[..cut]), format!("logical_product({text},{big})"), format!("composition({big}:{big},{text})"), format!("complement({text},{big})")] {
            let _ = eval_expr(&src);
        }
    }
}

#[test]
fn huge_numbers_are_errors_not_panics() {
    for src in [
        "size((4611686018427387904,4))",
        "cosize(3:4611686018427387904)",
        "logical_product(4611686018427387904:1, 4:1)",
        "complement(8:4611686018427387904, 9223372036854775807)",
        "(4611686018427387904,4)",
        "Sw<30,30,30>",
    ] {
        assert!(eval_expr(src).is_err(), "{src} should fail");
    }
}

/// Post-conditions of the functions ported from C++ CuTe beyond pycute's set.
mod cute_extras {
    use super::*;
    use irc_layout::{
        ComposedLayout, FUNCTIONS, IntTuple, Outer, downcast, group_modes, make_identity_layout,
        max_common_layout, max_common_vector, nullspace, tile_to_shape, upcast,
    };

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn right_inverse_holds_for_any_layout(seed: u64) {
            let l = random(seed, ANY);
            let r = right_inverse(&l).unwrap();
            for i in 0..r.size().unwrap() {
                prop_assert_eq!(l.eval(r.eval(i).unwrap()).unwrap(), i);
            }
        }

        #[test]
        fn left_inverse_is_a_quasi_inverse(seed: u64) {
            let l = random(seed, ANY);
            if let Ok(r) = left_inverse(&l) {
                for i in 0..l.size().unwrap() {
                    let li = l.eval(i).unwrap();
                    prop_assert_eq!(l.eval(r.eval(li).unwrap()).unwrap(), li, "{} -> {}", l, r);
                }
            }
        }

        #[test]
        fn upcast_then_downcast_is_the_same_function(seed: u64, n in prop::sample::select(vec![2i64, 4])) {
            let l = random(seed, Gen { zero: false, ..POW2 });
            // No stride may become 1 by the upcast (downcast would then widen that mode too).
            let ok = l.leaves().iter().all(|&(s, d)| if d == 1 { s % n == 0 } else { d % n == 0 && d != n });
            prop_assume!(ok && l.leaves().iter().any(|&(_, d)| d == 1));
            let back = downcast(&upcast(&l, n).unwrap(), n).unwrap();
            prop_assert_eq!(images(&back), images(&l));
        }

        #[test]
        fn max_common_layout_is_common_and_contiguous(sa: u64, swap: bool) {
            let x = random(sa, Gen { zero: false, gaps: false, ..POW2 });
            let y = Layout::compact(x.shape().clone()).unwrap();
            let (a, b) = if swap { (y, x) } else { (x, y) };
            let r = max_common_layout(&a, &b).unwrap();
            prop_assert_eq!(r.size().unwrap(), max_common_vector(&a, &b).unwrap());
            for i in 0..r.size().unwrap() {
                let j = r.eval(i).unwrap();
                prop_assert_eq!(a.eval(j).unwrap(), i);
                prop_assert_eq!(b.eval(j).unwrap(), i);
            }
        }

        #[test]
        fn nullspace_maps_to_zero(seed: u64) {
            let l = random(seed, ANY);
            let k = nullspace(&l).unwrap();
            for i in 0..k.size().unwrap() {
                prop_assert_eq!(l.eval(k.eval(i).unwrap()).unwrap(), 0);
            }
        }

        #[test]
        fn identity_layouts_map_coordinates_to_themselves(seed: u64) {
            let shape = random(seed, ANY).shape().clone();
            let id = make_identity_layout(&shape).unwrap();
            for i in 0..id.size().unwrap() {
                let c = id.idx2crd(i).unwrap();
                // The image is the arithmetic tuple of c: c itself, or (i) for an integer shape.
                let v = id.eval_coord(i).unwrap();
                let want = if shape.is_tuple() { c } else { IntTuple::Int(i) };
                prop_assert!(padded_eq(&v, &want), "{} at {}: {}", id, i, v);
            }
        }

        #[test]
        fn group_modes_keeps_the_function(seed: u64, b in 0usize..3, len in 0usize..3) {
            let l = random(seed, ANY);
            let e = (b + len).min(l.rank());
            prop_assume!(l.shape().is_tuple() && b <= e);
            let g = group_modes(&l, b, e).unwrap();
            prop_assert_eq!(g.rank(), l.rank() - (e - b) + 1);
            prop_assert_eq!(images(&g), images(&l));
        }

        #[test]
        fn tile_to_shape_reaches_the_target(seed: u64, m in prop::sample::select(vec![1i64, 2, 4]), n in prop::sample::select(vec![1i64, 2, 4])) {
            let block = random(seed, Gen { leaves: 2, zero: false, ..POW2 });
            prop_assume!(block.rank() <= 2);
            let modes = block.modes();
            let each = |k: usize| modes.get(k).map_or(1, |m| m.size().unwrap());
            let target = IntTuple::ints(&[each(0) * m, each(1) * n]);
            let t = tile_to_shape(&block, &target, None).unwrap();
            let got: Vec<i64> = t.modes().iter().map(|m| m.size().unwrap()).collect();
            prop_assert_eq!(got, target.flatten());
        }

        #[test]
        fn composed_layouts_apply_outer_after_inner(sa: u64, sb: u64, off in 0i64..4) {
            let outer = random(sa, Gen { zero: false, ..POW2 });
            let inner = random(sb, Gen { leaves: 2, ..POW2 });
            prop_assume!(inner.cosize().unwrap() + off <= outer.size().unwrap());
            let c = ComposedLayout { outer: Outer::Layout(outer.clone()), offset: off, layout: inner.clone() };
            for i in 0..inner.size().unwrap() {
                prop_assert_eq!(c.eval(i).unwrap(), outer.eval(off + inner.eval(i).unwrap()).unwrap());
            }
        }

        #[test]
        fn every_function_on_random_arguments_never_panics(seed: u64, f in 0usize..64, k in 0usize..4) {
            let mut rng = Rng::new(seed);
            let args = ["(4,8):(1@0,1@1)", "-3", "0", "(2,_)", "[2,_]", "Sw<2,1,3>", "(4,2):(-1,4)", "1", "(1,1):(0,0)", "16", "()", "(8,8):(8,1) o 2 o (4,4):(1,4)"];
            let name = FUNCTIONS[f % FUNCTIONS.len()].name;
            let mut list: Vec<String> = (0..k).map(|_| if rng.chance(50) { layout(&mut rng, ANY) } else { rng.pick(&args).to_string() }).collect();
            list.truncate(k);
            let _ = eval_expr(&format!("{name}({})", list.join(",")));
        }
    }

    /// Equality of coordinates up to trailing zero modes (arithmetic tuples `(a)` == `(a,0)`).
    fn padded_eq(a: &IntTuple, b: &IntTuple) -> bool {
        use irc_layout::int_tuple::basis_tuple;
        match (a, b) {
            (IntTuple::Basis(v, p), other) | (other, IntTuple::Basis(v, p)) => {
                padded_eq(&basis_tuple(*v, p), other)
            }
            (IntTuple::Tuple(x), IntTuple::Tuple(y)) => (0..x.len().max(y.len())).all(|i| {
                let zero = IntTuple::Int(0);
                padded_eq(x.get(i).unwrap_or(&zero), y.get(i).unwrap_or(&zero))
            }),
            (IntTuple::Tuple(x), IntTuple::Int(0)) | (IntTuple::Int(0), IntTuple::Tuple(x)) => {
                x.iter().all(|e| padded_eq(e, &IntTuple::Int(0)))
            }
            _ => a == b,
        }
    }
}
