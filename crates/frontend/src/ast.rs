//! The syntax tree the grammar builds: the text as written, with a span on every part.
//! [`crate::lower`] resolves names and types it into an `irc_ir::Module`.

use irc_ir::{Attr, Provenance, Span, TensorType};

/// Something with the byte range it was written at.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    pub node: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(node: T, l: usize, r: usize) -> Spanned<T> {
        Spanned {
            node,
            span: Span::new(l, r),
        }
    }
}

/// A type as written; `None` when it was malformed (already reported).
pub type AstType = Spanned<Option<TensorType>>;

#[derive(Clone, Debug, PartialEq)]
pub struct AstGraph {
    pub name: Spanned<String>,
    pub params: Vec<(Spanned<String>, AstType)>,
    pub results: Vec<AstType>,
    pub body: Vec<AstStmt>,
    pub span: Span,
    /// The closing brace.
    pub close: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AstStmt {
    Op(AstOp),
    Return {
        values: Vec<Spanned<String>>,
        span: Span,
    },
    /// A statement the parser could not read (already reported).
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AstOp {
    pub result: Spanned<String>,
    pub op: Spanned<String>,
    pub operands: Vec<Spanned<String>>,
    pub attrs: Vec<AstAttr>,
    pub ty: Option<AstType>,
    pub loc: Option<Provenance>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AstAttr {
    pub name: Spanned<String>,
    /// `None` when the value was malformed (already reported).
    pub value: Option<Attr>,
    pub span: Span,
}
