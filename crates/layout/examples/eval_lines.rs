//! Evaluate `irc layout` expressions, one per line of standard input (a development aid).
use std::io::BufRead;
fn main() {
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let expr = line.split('\t').next().unwrap_or("");
        match irc_layout::eval_expr(expr) {
            Ok(v) => println!("{expr}\t{v}"),
            Err(e) => println!("{expr}\terror: {e}"),
        }
    }
}
