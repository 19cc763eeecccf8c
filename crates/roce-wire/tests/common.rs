//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

/// Decodes hex, ignoring whitespace.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// The frames of testdata/icrc.md, each with its name, read from the file
/// itself so the test follows the document.
pub fn icrc_md_vectors() -> Vec<(String, Vec<u8>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/icrc.md");
    let text = std::fs::read_to_string(path).expect("testdata/icrc.md");
    let mut out = Vec::new();
    let mut name = String::new();
    let mut in_block = false;
    let mut buf = String::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            name = h.to_string();
        } else if line.starts_with("```") {
            if in_block {
                out.push((name.clone(), hex(&buf)));
                buf.clear();
            }
            in_block = !in_block;
        } else if in_block {
            buf.push_str(line);
        }
    }
    out
}
