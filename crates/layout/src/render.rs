//! Pictures of layouts: the `cute::print_layout` index grid as text, and SVG drawings (an index
//! grid, or for a thread-value layout the grid of `T<t> V<v>` cells colored by thread, as CuTe's
//! `print_latex` draws).
//!
//! A rank-2 layout is drawn with mode 0 down the rows and mode 1 across the columns; a rank-1
//! layout is drawn as a single row; a TV layout is drawn over its `M x N` tile.

use std::fmt::Write;

use super::atoms::TvLayout;
use super::core::Layout;
use super::error::{LayoutError, MAX_RENDER_CELLS, Result, mul};
use super::expr::Value;
use super::int_tuple::IntTuple;

/// A grid of labelled cells, ready to print or draw.
struct Grid {
    title: String,
    rows: i64,
    cols: i64,
    /// Row-major cell texts; an empty text is a cell no (thread, value) reaches.
    cells: Vec<String>,
    /// Row-major color keys (the index for a layout, the thread for a TV layout).
    keys: Vec<Option<i64>>,
    /// Whether cells hold `T<t>V<v>` pairs (drawn on two lines).
    tv: bool,
}

/// The `cute::print_layout`-style text grid of a rank-1 or rank-2 layout, a swizzled layout, or a
/// TV layout (cells `T<t>V<v>`); an error for other values and for more than
/// [`MAX_RENDER_CELLS`] cells.
pub fn render_table(v: &Value) -> Result<String> {
    Ok(table_text(&grid(v)?))
}

/// An SVG drawing of the same grid; TV layouts are colored by thread.
pub fn render_svg(v: &Value) -> Result<String> {
    Ok(svg_text(&grid(v)?))
}

fn grid(v: &Value) -> Result<Grid> {
    match v {
        Value::Layout(l) => index_grid(&l.to_string(), l, &|crd| l.crd2idx(crd)),
        Value::Composed(c) => index_grid(&c.to_string(), &c.layout, &|crd| c.crd2idx(crd)),
        Value::Tv(tv) => tv_grid(tv),
        other => Err(LayoutError::Argument(format!(
            "only layouts and TV layouts can be drawn, not `{other}`"
        ))),
    }
}

/// `(rows, cols)` of the drawing of `layout`, checked against the cell limit.
fn grid_dims(layout: &Layout) -> Result<(i64, i64)> {
    let (rows, cols) = match layout.rank() {
        1 => (1, layout.size()?),
        2 => (layout.mode(0)?.size()?, layout.mode(1)?.size()?),
        r => {
            return Err(LayoutError::domain(
                "render",
                format!("only rank-1 and rank-2 layouts can be drawn, {layout} has rank {r}"),
            ));
        }
    };
    check_cells(rows, cols)?;
    Ok((rows, cols))
}

fn check_cells(rows: i64, cols: i64) -> Result<()> {
    let cells = mul("render", rows, cols)?;
    if cells > MAX_RENDER_CELLS {
        return Err(LayoutError::domain(
            "render",
            format!("{rows}x{cols} = {cells} cells; at most {MAX_RENDER_CELLS} can be drawn"),
        ));
    }
    Ok(())
}

fn index_grid(title: &str, layout: &Layout, at: &dyn Fn(&IntTuple) -> Result<i64>) -> Result<Grid> {
    let (rows, cols) = grid_dims(layout)?;
    let mut keys = Vec::with_capacity((rows * cols) as usize);
    for r in 0..rows {
        for c in 0..cols {
            let crd = if layout.rank() == 2 {
                IntTuple::ints(&[r, c])
            } else {
                IntTuple::Int(c)
            };
            keys.push(Some(at(&crd)?));
        }
    }
    let cells = keys
        .iter()
        .map(|k| k.map(|k| k.to_string()).unwrap_or_default())
        .collect();
    Ok(Grid {
        title: title.to_string(),
        rows,
        cols,
        cells,
        keys,
        tv: false,
    })
}

fn tv_grid(tv: &TvLayout) -> Result<Grid> {
    let (rows, cols) = tv.tile();
    check_cells(rows, cols)?;
    let (threads, values) = (tv.threads()?, tv.values()?);
    check_cells(threads, values)?;
    let n = (rows * cols) as usize;
    let (mut cells, mut keys) = (vec![String::new(); n], vec![None; n]);
    for t in 0..threads {
        for v in 0..values {
            let (r, c) = tv.coord(t, v)?;
            let k = (r * cols + c) as usize;
            if cells[k].is_empty() {
                cells[k] = format!("T{t}V{v}");
                keys[k] = Some(t);
            }
        }
    }
    Ok(Grid {
        title: tv.to_string(),
        rows,
        cols,
        cells,
        keys,
        tv: true,
    })
}

fn table_text(g: &Grid) -> String {
    let w = g.cells.iter().map(String::len).max().unwrap_or(1).max(1);
    let rw = (g.rows - 1).max(0).to_string().len().max(2);
    let pad = " ".repeat(rw + 2);
    let rule = format!(
        "{pad}{}+\n",
        format!("+{}", "-".repeat(w + 2)).repeat(g.cols as usize)
    );
    let mut out = format!("{}\n{pad}", g.title);
    for c in 0..g.cols {
        let _ = write!(out, "  {c:>w$} ");
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    for r in 0..g.rows {
        out.push_str(&rule);
        let _ = write!(out, "{r:>rw$}  ");
        for c in 0..g.cols {
            let _ = write!(out, "| {:>w$} ", g.cells[(r * g.cols + c) as usize]);
        }
        out.push_str("|\n");
    }
    out.push_str(&rule);
    out
}

/// Pastel fills, indexed by thread (TV) or index (layouts) modulo 8.
const PALETTE: [&str; 8] = [
    "#afafff", "#afffaf", "#ffffaf", "#ffafaf", "#d2d2ff", "#d2ffd2", "#ffffd2", "#ffd2d2",
];

fn svg_text(g: &Grid) -> String {
    let (cw, ch) = if g.tv { (44, 32) } else { (32, 24) };
    let (x0, y0) = (32, 44);
    let (width, height) = (x0 + cw * g.cols + 8, y0 + ch * g.rows + 8);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">"#
    );
    let _ = writeln!(s, r#"<text x="4" y="14">{}</text>"#, escape(&g.title));
    for c in 0..g.cols {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{c}</text>"#,
            x0 + c * cw + cw / 2,
            y0 - 6
        );
    }
    for r in 0..g.rows {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{r}</text>"#,
            x0 - 6,
            y0 + r * ch + ch / 2 + 4
        );
        for c in 0..g.cols {
            let k = (r * g.cols + c) as usize;
            svg_cell(&mut s, g, k, x0 + c * cw, y0 + r * ch, (cw, ch));
        }
    }
    s.push_str("</svg>\n");
    s
}

fn svg_cell(s: &mut String, g: &Grid, k: usize, x: i64, y: i64, (cw, ch): (i64, i64)) {
    let fill = g.keys[k].map_or("#ffffff", |key| PALETTE[key.rem_euclid(8) as usize]);
    let _ = writeln!(
        s,
        r#"<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{fill}" stroke="black"/>"#
    );
    let cx = x + cw / 2;
    let text = &g.cells[k];
    match text.split_once('V').filter(|_| g.tv) {
        Some((t, v)) => {
            let _ = writeln!(
                s,
                r#"<text x="{cx}" y="{}" text-anchor="middle">{t}</text>"#,
                y + ch / 2 - 2
            );
            let _ = writeln!(
                s,
                r#"<text x="{cx}" y="{}" text-anchor="middle">V{v}</text>"#,
                y + ch / 2 + 10
            );
        }
        None => {
            let _ = writeln!(
                s,
                r#"<text x="{cx}" y="{}" text-anchor="middle">{text}</text>"#,
                y + ch / 2 + 4
            );
        }
    }
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
