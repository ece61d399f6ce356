//! Literal tokens to values. Problems are recorded as diagnostics and the literal becomes
//! `None`, so one bad number does not stop the parse.

use irc_ir::{Attr, DType, Diagnostic, Span, TensorType};

fn report<T>(diags: &mut Vec<Diagnostic>, l: usize, r: usize, message: String) -> Option<T> {
    diags.push(Diagnostic::error(Some(Span::new(l, r)), message));
    None
}

pub fn int(s: &str, l: usize, r: usize, diags: &mut Vec<Diagnostic>) -> Option<i64> {
    match s.parse::<i64>() {
        Ok(i) => Some(i),
        Err(_) => report(
            diags,
            l,
            r,
            format!("integer `{s}` does not fit in 64 bits"),
        ),
    }
}

pub fn u32(s: &str, l: usize, r: usize, diags: &mut Vec<Diagnostic>) -> u32 {
    match s.parse::<u32>() {
        Ok(i) => i,
        Err(_) => report(
            diags,
            l,
            r,
            format!("`{s}` is not a valid line or column number"),
        )
        .unwrap_or(0),
    }
}

pub fn float(s: &str, l: usize, r: usize, diags: &mut Vec<Diagnostic>) -> Option<f64> {
    if s == "-inf" {
        return Some(f64::NEG_INFINITY);
    }
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => Some(x),
        _ => report(diags, l, r, format!("float `{s}` is out of range")),
    }
}

/// A string literal's contents, with escapes (`\"`, `\\`, `\n`, `\t`, `\u{..}`) resolved.
pub fn string(s: &str, l: usize, r: usize, diags: &mut Vec<Diagnostic>) -> Option<String> {
    let inner = &s[1..s.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let esc = match chars.next() {
            Some('"') => '"',
            Some('\\') => '\\',
            Some('n') => '\n',
            Some('t') => '\t',
            Some('u') => match unicode_escape(&mut chars) {
                Some(c) => c,
                None => {
                    return report(diags, l, r, "invalid \\u{...} escape in string".to_string());
                }
            },
            other => {
                let shown = other.map(String::from).unwrap_or_default();
                return report(diags, l, r, format!("unknown escape `\\{shown}` in string"));
            }
        };
        out.push(esc);
    }
    Some(out)
}

fn unicode_escape(chars: &mut std::str::Chars<'_>) -> Option<char> {
    if chars.next()? != '{' {
        return None;
    }
    let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
    if hex.is_empty() || hex.len() > 6 {
        return None;
    }
    char::from_u32(u32::from_str_radix(&hex, 16).ok()?)
}

/// A bare identifier as an attribute value: a dtype, or `inf`/`nan`.
pub fn ident_value(s: &str, l: usize, r: usize, diags: &mut Vec<Diagnostic>) -> Option<Attr> {
    if let Ok(d) = s.parse::<DType>() {
        return Some(Attr::DType(d));
    }
    match s {
        "inf" => Some(Attr::Float(f64::INFINITY)),
        "nan" => Some(Attr::Float(f64::NAN)),
        _ => report(
            diags,
            l,
            r,
            format!(
                "`{s}` is not an attribute value; expected a number, boolean, string, dtype or array"
            ),
        ),
    }
}

pub fn tensor_type(s: &str, l: usize, diags: &mut Vec<Diagnostic>) -> Option<TensorType> {
    match crate::types::parse_tensor_type(s, l) {
        Ok(t) => Some(t),
        Err(d) => {
            diags.push(d);
            None
        }
    }
}
