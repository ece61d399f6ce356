//! `spec/graph-ir.md` is kept true: its generated sections must equal what the op table and
//! the grammar produce now. `IRC_BLESS=1` rewrites them.

fn replace_section(doc: &str, name: &str, body: &str) -> String {
    let begin = format!("<!-- BEGIN GENERATED: {name} -->\n");
    let end = format!("<!-- END GENERATED: {name} -->");
    let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
        panic!("the spec lacks the markers of section {name}");
    };
    format!("{}{begin}{body}{}", &doc[..b], &doc[e..])
}

fn generate(doc: &str) -> String {
    let ops = format!(
        "## Ops (generated)\n\n{}",
        irc_ir::ops::reference_markdown()
    );
    let grammar = format!("```\n{}```\n", irc_frontend::GRAMMAR);
    replace_section(&replace_section(doc, "ops", &ops), "grammar", &grammar)
}

#[test]
fn passes_spec_is_fresh() {
    let path = irc_tests::root().join("spec/passes.md");
    let committed = std::fs::read_to_string(&path).expect("spec/passes.md exists");
    let body = format!(
        "## Passes (generated)\n\n{}",
        irc_passes::registry::reference_markdown()
    );
    let fresh = replace_section(&committed, "passes", &body);
    if std::env::var_os("IRC_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("spec writable");
    } else {
        assert!(
            fresh == committed,
            "spec/passes.md is stale; run `IRC_BLESS=1 cargo test -p irc-tests --test spec`"
        );
    }
}

#[test]
fn spec_is_fresh() {
    let path = irc_tests::root().join("spec/graph-ir.md");
    let committed = std::fs::read_to_string(&path).expect("spec/graph-ir.md exists");
    let fresh = generate(&committed);
    if std::env::var_os("IRC_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("spec writable");
    } else {
        assert!(
            fresh == committed,
            "spec/graph-ir.md is stale; run `IRC_BLESS=1 cargo test -p irc-tests --test spec`"
        );
    }
}
