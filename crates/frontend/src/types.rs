//! Parsing the body of a `tensor<...>` token.

use irc_ir::{DType, Diagnostic, Span, TensorType};

/// Parses `tensor<2x3xf32>` (the whole token, starting at byte `start`), reporting the exact
/// part that is wrong.
pub fn parse_tensor_type(text: &str, start: usize) -> Result<TensorType, Diagnostic> {
    let body = &text["tensor<".len()..text.len() - 1];
    let body_start = start + "tensor<".len();
    let mut shape = Vec::new();
    let mut offset = 0usize;
    let parts: Vec<&str> = body.split('x').collect();
    // A dtype containing `x` does not exist, so the last `x`-separated part is the dtype.
    let (dtype_part, dims) = parts.split_last().unwrap_or((&"", &[]));
    for &dim in dims {
        let span = Some(Span::new(
            body_start + offset,
            body_start + offset + dim.len(),
        ));
        if dim.is_empty() || !dim.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Diagnostic::error(
                span,
                format!(
                    "expected a static dimension size, found `{dim}` (shapes are static: write e.g. tensor<4x8xf32>)"
                ),
            ));
        }
        let n: u64 = dim
            .parse()
            .map_err(|_| Diagnostic::error(span, format!("dimension `{dim}` is too large")))?;
        shape.push(n);
        offset += dim.len() + 1;
    }
    let span = Some(Span::new(body_start + offset, body_start + body.len()));
    let dtype: DType = dtype_part.trim().parse().map_err(|()| {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        Diagnostic::error(
            span,
            format!(
                "unknown dtype `{dtype_part}`; expected one of {}",
                names.join(", ")
            ),
        )
    })?;
    let ty = TensorType::new(shape, dtype);
    ty.check().map_err(|e| {
        Diagnostic::error(
            Some(Span::new(start, start + text.len())),
            format!("invalid type {ty}: {e}"),
        )
    })?;
    Ok(ty)
}
