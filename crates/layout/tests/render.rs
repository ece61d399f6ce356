//! Snapshots of `render_table` (the `cute::print_layout`-style grid) and checks of `render_svg`.
//!
//! Each snapshot is `tests/snapshots/<name>.txt`; run with `IRC_BLESS=1` to rewrite them.

use std::path::PathBuf;

use irc_layout::{eval_expr, render_svg, render_table};

/// Compare `render_table(eval(expr))` with the snapshot `name`, or rewrite it under `IRC_BLESS`.
#[track_caller]
fn check_table(name: &str, expr: &str) {
    let got = render_table(&eval_expr(expr).unwrap()).unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("IRC_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing snapshot {}; run with IRC_BLESS=1", path.display()));
    assert_eq!(got, want, "snapshot {name} for `{expr}`");
}

#[test]
fn column_major() {
    check_table("col_major_4x8", "(4,8)");
}

#[test]
fn hierarchical() {
    check_table("hier_4x_2x3", "(4,(2,3)):(2,(1,8))");
}

#[test]
fn rank_one_is_one_row() {
    check_table("rank1_8", "8:3");
}

#[test]
fn swizzled() {
    check_table("sw_1_1_2_8x8", "Sw<1,1,2> o (4,8):(8,1)");
}

#[test]
fn thread_value() {
    check_table("mma_c_tv", "mma_m16n8k16_c");
}

#[test]
fn tables_refuse_what_is_not_a_picture() {
    for expr in ["(2,2,2)", "size((4,8))", "(4096,4096)"] {
        assert!(render_table(&eval_expr(expr).unwrap()).is_err(), "{expr}");
    }
}

#[test]
fn svg_draws_every_cell() {
    let svg = render_svg(&eval_expr("(4,8):(8,1)").unwrap()).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<rect").count(), 32);
    assert!(svg.contains(">31</text>"));
    let tv = render_svg(&eval_expr("mma_m16n8k16_a").unwrap()).unwrap();
    assert_eq!(tv.matches("<rect").count(), 256);
    assert!(tv.contains(">T31</text>") && tv.contains(">V7</text>"));
    assert!(tv.contains("tv(((4,8),(2,2,2)):((32,1),(16,8,128)),(16,16))"));
}
