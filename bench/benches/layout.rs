//! Layout algebra speed: composition and logical_divide must be cheap enough to run inside an
//! autotuning loop (thousands of candidate tilings per kernel). Run with
//! `cargo bench -p irc-bench --bench layout`.

use divan::{Bencher, black_box};
use irc_layout::{
    Layout, Tiler, composition, eval_expr, logical_divide, parse_layout, zipped_divide,
};

fn main() {
    divan::main();
}

fn layout(text: &str) -> Layout {
    parse_layout(text).expect("benchmark layouts parse")
}

/// A flat composition: a row-major 128x64 tile viewed through a 2-level thread arrangement.
#[divan::bench]
fn composition_flat(b: Bencher) {
    let (a, t) = (layout("(128,64):(64,1)"), layout("(8,(4,2)):(2,(16,64))"));
    b.bench(|| composition(black_box(&a), black_box(&t)));
}

/// A hierarchical composition like those of a TV layout onto a swizzle-free smem tile.
#[divan::bench]
fn composition_hierarchical(b: Bencher) {
    let (a, t) = (
        layout("((8,16),(8,8)):((8,64),(1,1024))"),
        layout("((4,8),(2,2,2)):((32,1),(16,8,128))"),
    );
    b.bench(|| composition(black_box(&a), black_box(&t)));
}

/// Tiling a 4096x4096 column-major matrix by a 128x64 CTA tile, by mode.
#[divan::bench]
fn logical_divide_cta_tile(b: Bencher) {
    let a = layout("(4096,4096):(1,4096)");
    let t = Tiler::Modes(vec![
        Tiler::Layout(layout("128:1")),
        Tiler::Layout(layout("64:1")),
    ]);
    b.bench(|| logical_divide(black_box(&a), black_box(&t)));
}

/// Dividing by a strided (non-contiguous) tile: the complement does real work.
#[divan::bench]
fn logical_divide_strided(b: Bencher) {
    let (a, t) = (
        layout("(4096,4096):(1,4096)"),
        Tiler::Layout(layout("(4,8):(2,64)")),
    );
    b.bench(|| logical_divide(black_box(&a), black_box(&t)));
}

#[divan::bench]
fn zipped_divide_cta_tile(b: Bencher) {
    let a = layout("(4096,4096):(1,4096)");
    let t = Tiler::Modes(vec![
        Tiler::Layout(layout("128:1")),
        Tiler::Layout(layout("64:1")),
    ]);
    b.bench(|| zipped_divide(black_box(&a), black_box(&t)));
}

/// The whole `irc layout` path for one expression: parse, evaluate, print.
#[divan::bench]
fn eval_expr_logical_divide(b: Bencher) {
    b.bench(|| {
        eval_expr(black_box(
            "logical_divide((4096,4096):(1,4096),[128:1,64:1])",
        ))
        .map(|v| v.to_string())
    });
}
