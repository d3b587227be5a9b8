//! `tests/transcripts/*.txt`: `> command` lines, each followed by the reply exactly as
//! `redis-cli --no-raw` prints it; `#` lines are comments. Read by `tests/transcripts.rs`
//! (the printed replies) and `tests/reply_shapes.rs` (the same commands under both protocols).

use std::path::{Path, PathBuf};

pub struct Step {
    pub line: usize,
    pub command: String,
    pub expected: Vec<String>,
}

pub fn parse(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(command) = line.strip_prefix("> ") {
            steps.push(Step {
                line: n + 1,
                command: command.to_string(),
                expected: Vec::new(),
            });
        } else if line.starts_with('#')
            || (line.is_empty() && steps.last().is_none_or(|s| !s.expected.is_empty()))
        {
            continue;
        } else {
            steps
                .last_mut()
                .expect("a reply line before any command")
                .expected
                .push(line.to_string());
        }
    }
    steps
}

/// A command line's words as redis-cli splits them: blanks apart, `"..."` with `\"`, `\\`,
/// `\n` and `\xHH` escapes, `'...'` as written.
pub fn words(command: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut chars = command.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return out;
        };
        let mut word = Vec::new();
        if first == '"' || first == '\'' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    c if c == first => break,
                    '\\' if first == '"' => match chars.next() {
                        Some('n') => word.push(b'\n'),
                        Some('x') => {
                            let hex: String = chars.by_ref().take(2).collect();
                            word.push(u8::from_str_radix(&hex, 16).expect("\\xHH"));
                        }
                        Some(c) => word.extend(c.to_string().bytes()),
                        None => break,
                    },
                    c => word.extend(c.to_string().bytes()),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                word.extend(c.to_string().bytes());
            }
        }
        out.push(word);
    }
}

/// The body of the first fenced code block in `text` (a README or docs page), each line
/// ending with a newline.
pub fn first_code_block(text: &str) -> String {
    text.lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `tests/transcripts/`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/transcripts")
}

/// Every transcript file, sorted.
pub fn files() -> Vec<PathBuf> {
    let dir = dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_commands_and_replies() {
        let steps = parse("# c\n> PING\nPONG\n\n> X\n1) a\n2) b\n");
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].expected, vec!["PONG"]);
        assert_eq!(steps[1].expected, vec!["1) a", "2) b"]);
    }

    #[test]
    fn first_code_block_is_the_fenced_body() {
        assert_eq!(
            first_code_block("x\n```js\na\nb\n```\n```\nc\n```\n"),
            "a\nb\n"
        );
        assert_eq!(first_code_block("no block"), "");
    }

    #[test]
    fn words_split_as_redis_cli_does() {
        let w = |s: &str| -> Vec<String> {
            words(s)
                .into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect()
        };
        assert_eq!(w("SECKILL.TRY  s  alice"), ["SECKILL.TRY", "s", "alice"]);
        assert_eq!(
            w(r#"A "" 'b c' "d\"e" "\x41\n""#),
            ["A", "", "b c", "d\"e", "A\n"]
        );
        assert!(w("   ").is_empty());
    }
}
