//! Examples of the `irc layout` expression language, each checked through one helper.
//!
//! Expected values are computed by hand from the definitions (and agree with the CuTe
//! documentation's worked examples where one exists).

use irc_layout::{LayoutError, eval_expr, parse_layout};

/// Evaluate `expr` and compare its printed result with `expected` (`error: ...` for errors).
#[track_caller]
fn check(expr: &str, expected: &str) {
    let got = match eval_expr(expr) {
        Ok(v) => v.to_string(),
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(got, expected, "for `{expr}`");
}

/// Evaluate `expr`, expect an error whose message contains `needle`, and return it.
#[track_caller]
fn check_err(expr: &str, needle: &str) -> LayoutError {
    match eval_expr(expr) {
        Ok(v) => panic!("`{expr}` gave {v}, expected an error containing {needle:?}"),
        Err(e) => {
            assert!(
                e.to_string().contains(needle),
                "`{expr}`: error `{e}` lacks {needle:?}"
            );
            e
        }
    }
}

#[test]
fn literals_print_in_cute_notation() {
    check("(4,(2,3)):(1,(8,16))", "(4,(2,3)):(1,(8,16))");
    check("( 4 , 8 )", "(4,8):(1,4)");
    check("(4,(2,3))", "(4,(2,3)):(1,(4,8))");
    check("8", "8");
    check("8:2", "8:2");
    check("(4):(1)", "(4):(1)");
    check("(4,2):(-1,4)", "(4,2):(-1,4)");
    check("Sw<3,3,3> o (8,64):(64,1)", "Sw<3,3,3> o (8,64):(64,1)");
    check(
        "Sw<3,3,3> o 16 o (8,64):(64,1)",
        "Sw<3,3,3> o 16 o (8,64):(64,1)",
    );
}

#[test]
fn queries() {
    check("size((4,(2,3)):(1,(8,16)))", "24");
    check("cosize((4,(2,3)):(1,(8,16)))", "44");
    check("rank((4,(2,3)))", "2");
    check("depth((4,(2,3)))", "2");
    check("shape((4,(2,3)):(1,(8,16)))", "(4,(2,3))");
    check("stride((4,(2,3)):(1,(8,16)))", "(1,(8,16))");
    check("get((4,(2,3)):(1,(8,16)), 1)", "(2,3):(8,16)");
    check("get((4,(2,3)):(1,(8,16)), 1, 0)", "2:8");
    check("flatten((4,(2,3)):(1,(8,16)))", "(4,2,3):(1,8,16)");
}

#[test]
fn evaluation_and_slicing() {
    check("(4,(2,3)):(1,(8,16))(5)", "9");
    check("(4,(2,3)):(1,(8,16))(1,3)", "25");
    check("(4,(2,3)):(1,(8,16))(1,(1,2))", "41");
    check("(4,8):(1,4)(_,2)", "(4):(1)");
    check("(4,8):(1,4)(2,_)", "(8):(4)");
    check("slice_and_offset((_,2), (4,8):(1,4))", "((4):(1),8)");
    check("((2,3),4):((1,2),6)((_,1),_)", "(2,4):(1,6)");
    check("crd2idx((1,2), (4,8):(8,1))", "10");
    check("idx2crd(13, (4,(2,3)))", "(1,(1,1))");
    check("Sw<3,3,3> o (8,64):(64,1)(1,8)", "64");
    check("Sw<1,0,1>(2)", "3");
}

#[test]
fn building() {
    check("make_layout(4:1, (2,3):(4,8))", "(4,(2,3)):(1,(4,8))");
    check("append((4,8):(1,4), 2:32)", "(4,8,2):(1,4,32)");
    check("prepend((4,8):(1,4), 2:32)", "(2,4,8):(32,1,4)");
    check("append(4:1, 2:4)", "(4,2):(1,4)");
}

#[test]
fn coalesce_and_filter() {
    check("coalesce((2,(1,6)):(1,(6,2)))", "12:1");
    check("coalesce((4,8):(8,1))", "(4,8):(8,1)");
    check(
        "coalesce((2,(2,2)):(1,(2,8)), (1,1))",
        "(2,(2,2)):(1,(2,8))",
    );
    check(
        "coalesce(((2,2),(2,2)):((1,2),(8,16)), (1,1))",
        "(4,4):(1,8)",
    );
    check("filter((4,2,(1,3)):(1,0,(7,4)))", "12:1");
    check("filter((4,2,(1,3)):(1,0,(7,5)))", "(4,3):(1,5)");
    check("filter((3,2):(0,0))", "1:0");
}

#[test]
fn composition_examples() {
    // CuTe documentation: (6,2):(8,2) o (4,3):(3,1) = ((2,2),3):((24,2),8)
    check(
        "composition((6,2):(8,2), (4,3):(3,1))",
        "((2,2),3):((24,2),8)",
    );
    check(
        "composition((10,2):(16,4), (5,4):(1,5))",
        "(5,(2,2)):(16,(80,4))",
    );
    check("composition(20:2, (4,5):(1,4))", "(4,5):(2,8)");
    check(
        "composition((12,(4,8)):(59,(13,1)), [3:4, 8:2])",
        "(3,(2,4)):(236,(26,1))",
    );
    check("composition((4,8):(1,4), 4:0)", "4:0");
    check(
        "composition(Sw<3,3,3>, (8,64):(64,1))",
        "Sw<3,3,3> o (8,64):(64,1)",
    );
    check_err("composition((4,6):(1,5), 3:3)", "shape divisibility");
    check_err("composition((4,6):(1,10), 6:1)", "does not divide");
}

#[test]
fn complement_and_inverses() {
    check("complement(4:1, 24)", "6:4");
    check("complement(6:4, 24)", "4:1");
    check("complement((4,6):(1,4), 24)", "1:0");
    check("complement(4:2, 24)", "(2,3):(1,8)");
    check("complement((2,2):(1,6), 24)", "(3,2):(2,12)");
    check("complement((2,4):(1,6))", "3:2");
    check("right_inverse((4,8):(8,1))", "(8,4):(4,1)");
    check("right_inverse((2,3):(3,1))", "(3,2):(2,1)");
    check("left_inverse((4,2):(2,1))", "(2,4):(4,1)");
    check("right_inverse((2,4):(0,1))", "4:2");
    // Interleaved modes: C++ CuTe returns a smaller complement rather than failing.
    check("complement((2,2):(1,3), 12)", "2:6");
}

#[test]
fn divides() {
    // CuTe documentation: logical_divide((4,2,3):(2,1,8), 4:2) = ((2,2),(2,3)):((4,1),(2,8))
    check(
        "logical_divide((4,2,3):(2,1,8), 4:2)",
        "((2,2),(2,3)):((4,1),(2,8))",
    );
    check(
        "logical_divide((9,(4,8)):(59,(13,1)), [3:3, (2,4):(1,8)])",
        "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))",
    );
    check(
        "zipped_divide((9,(4,8)):(59,(13,1)), [3:3, (2,4):(1,8)])",
        "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))",
    );
    check(
        "tiled_divide((9,(4,8)):(59,(13,1)), [3:3, (2,4):(1,8)])",
        "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))",
    );
    check(
        "flat_divide((9,(4,8)):(59,(13,1)), [3:3, (2,4):(1,8)])",
        "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))",
    );
    check("logical_divide((8,8):(1,8), [2, _])", "((2,4),8):((1,2),8)");
    // As in C++ CuTe, a `_` in a zipped tiler keeps its mode, which must have rank 2 to be split.
    check_err("zipped_divide((8,8):(1,8), [2, _])", "must have rank 2");
    check(
        "zipped_divide((8,(2,4)):(1,(8,16)), [2, _])",
        "((2,2),(4,4)):((1,8),(2,16))",
    );
    check("logical_divide(16:1, 4)", "(4,4):(1,4)");
}

#[test]
fn products() {
    // CuTe documentation: logical_product((2,2):(4,1), 6:1) = ((2,2),(2,3)):((4,1),(2,8))
    check(
        "logical_product((2,2):(4,1), 6:1)",
        "((2,2),(2,3)):((4,1),(2,8))",
    );
    check(
        "logical_product((2,2):(4,1), (4,2):(2,1))",
        "((2,2),(4,2)):((4,1),(8,2))",
    );
    check(
        "blocked_product((2,5):(5,1), (3,4):(1,3))",
        "((2,3),(5,4)):((5,10),(1,30))",
    );
    check(
        "raked_product((2,5):(5,1), (3,4):(1,3))",
        "((3,2),(4,5)):((10,5),(30,1))",
    );
    check(
        "zipped_product((2,5):(5,1), [3:1, 4:1])",
        "((2,5),(3,4)):((5,1),(1,5))",
    );
    check(
        "tiled_product((2,5):(5,1), [3:1, 4:1])",
        "((2,5),3,4):((5,1),1,5)",
    );
    check(
        "flat_product((2,5):(5,1), [3:1, 4:1])",
        "(2,5,3,4):(5,1,1,5)",
    );
}

#[test]
fn errors_point_into_the_expression() {
    let e = check_err("size((4,8):(1,4)", "expected `,` or `)`");
    assert_eq!(e.offset(), Some(16));
    let e = check_err("coalesce((4,8):(1,4)) junk", "unexpected text");
    assert_eq!(e.offset(), Some(22));
    let e = check_err("size(frob(3))", "unknown function `frob`");
    assert_eq!(e.offset(), Some(5));
    let e = check_err("size(composition((4,6):(1,5), 3:3))", "composition: ");
    assert_eq!(e.offset(), Some(5));
    check_err("(4,8):(1,4,2)", "differ in structure");
    check_err("(4,0)", "sizes must be at least 1");
    check_err("99999999999999999999", "does not fit");
    check_err("size((4294967296,4294967296))", "overflow");
    check_err("(4,8):(1,4)(40)", "out of range");
    check_err("size(1,2)", "size takes 1 argument(s), got 2");
    check_err(
        &format!("{}4{}", "(".repeat(100), ")".repeat(100)),
        "nesting deeper",
    );
    check_err(
        &format!("{}4{}", "size(".repeat(100), ")".repeat(100)),
        "nesting deeper",
    );
    check_err("Sw<3,3,2>", "B <= |S|");
    check_err("_", "only allowed");
    check_err("$", "unexpected character");
}

#[test]
fn the_text_form_round_trips() {
    for text in [
        "(4,(2,3)):(1,(8,16))",
        "(4):(1)",
        "():()",
        "7:0",
        "((2,2),((2,2),2)):((4,1),((2,16),8))",
    ] {
        let l = parse_layout(text).unwrap();
        assert_eq!(l.to_string(), text);
        assert_eq!(parse_layout(&l.to_string()).unwrap(), l);
    }
}

#[test]
fn composed_layouts_with_a_layout_outside() {
    check(
        "(4,5):(1,4) o 2 o (3,5):(1,4)",
        "(4,5):(1,4) o 2 o (3,5):(1,4)",
    );
    check("(4,5):(1,4) o 0 o (3,5):(1,4)", "(4,5):(1,4) o (3,5):(1,4)");
    // i -> outer(2 + inner(i)): inner(4) = 5, outer(7) = 3 + 4*1.
    check("(4,5):(1,4) o 2 o (3,5):(1,4)(4)", "7");
    check("crd2idx(4, (4,5):(1,4) o 2 o (3,5):(1,4))", "7");
    check("size((4,5):(1,4) o 2 o (3,5):(1,4))", "15");
    check(
        "(4,5):(1,4) o 2 o (3,5):(1,4)(_,1)",
        "(4,5):(1,4) o 6 o (3):(1)",
    );
    check(
        "composition((8,8):(8,1) o 1 o (4,4):(1,4), [2,2])",
        "(8,8):(8,1) o 1 o (2,2):(1,4)",
    );
    check(
        "make_composed_layout((8,8):(8,1), 1, (4,4):(1,4))",
        "(8,8):(8,1) o 1 o (4,4):(1,4)",
    );
    check(
        "logical_divide(Sw<3,3,3> o (8,64):(64,1), [4,8])",
        "Sw<3,3,3> o ((4,2),(8,8)):((64,256),(1,8))",
    );
}

#[test]
fn scaled_basis_strides() {
    check("(4,8):(1@0,1@1)", "(4,8):(1@0,1@1)");
    check(
        "(2,(2,4)):(1@0,(1@0@1,1@1@1))",
        "(2,(2,4)):(1@0,(1@0@1,1@1@1))",
    );
    check("(4,8):(1@0,1@1)(13)", "(1,3)");
    check("(4,8):(1@0,1@1)(3,7)", "(3,7)");
    check(
        "make_identity_layout((4,(2,3)))",
        "(4,(2,3)):(1@0,(1@0@1,1@1@1))",
    );
    check(
        "composition((4,8):(1@0,1@1), (2,4):(2,8))",
        "(2,4):(2@0,2@1)",
    );
    check("coalesce((4,8):(1@0,4@0))", "32:1@0");
    check(
        "zipped_divide(make_identity_layout((128,64)), [64,32])",
        "((64,32),(2,2)):((1@0,1@1),(64@0,32@1))",
    );
    check_err("(4@0,8):(1,1)", "only strides may");
    check_err("crd2idx(3, (4,8):(1@0,1@1))", "coordinate");
    check_err("complement((4,8):(1@0,1@1))", "integer strides");
}

/// An empty block tiles nothing: an error, not an index out of bounds (found by
/// `every_function_on_random_arguments_never_panics`).
#[test]
fn tile_to_shape_of_an_empty_block_is_an_error() {
    check_err("tile_to_shape(():(),8)", "does not give a block");
}
