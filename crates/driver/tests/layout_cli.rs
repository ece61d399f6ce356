//! `irc layout` on the command line: values, errors and expressions that start with `-`.

mod common;

use common::irc;

fn stdout(args: &[&str]) -> String {
    let out = irc(args);
    assert!(
        out.status.success(),
        "irc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn evaluates_expressions() {
    assert_eq!(
        stdout(&["layout", "(4,8)", "size((4,8))"]),
        "(4,8):(1,4)\n32\n"
    );
    assert_eq!(
        stdout(&["layout", "composition((8,8):(8,1),2:3)"]),
        "2:24\n"
    );
    assert_eq!(stdout(&["layout", "(4,8):(1@0,1@1)(5)"]), "(1,1)\n");
}

#[test]
fn an_expression_may_start_with_a_minus() {
    assert_eq!(stdout(&["layout", "-1", "(2,2)"]), "-1\n(2,2):(1,2)\n");
    // `-4:1` reaches the layout language (a negative size is its error), not clap's flag parser.
    let out = irc(&["layout", "-4:1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("sizes must be at least 1"), "{err}");
    // Flags still work before and after the expressions.
    assert_eq!(
        stdout(&["layout", "--table", "(2,2):(2,1)"]),
        stdout(&["layout", "(2,2):(2,1)", "--table"])
    );
}
