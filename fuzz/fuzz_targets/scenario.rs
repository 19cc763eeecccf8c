//! Fuzzes the simulator's scenario parser: any text must parse into a
//! scenario or fail with an error naming the key, never panic or abort on
//! allocation. Parsed scenarios are validated (`check_counts`, `warnings`)
//! and their flow list expanded (bounded by the parser's flow cap); the
//! simulation is not run. The CDF arrays of the `cdf` key are parsed too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_sim::{Cdf, Scenario};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A `cdf` that is not a shipped name is read as a file: keep the
    // fuzzer off devices that never end (`/dev/zero`, `/dev/stdin`) and
    // the kernel's files (scenario files are trusted input).
    // (A TOML escape could spell the slash: `\u002fdev`.)
    let escaped = text.contains("\\u") || text.contains("\\U");
    if ["/dev", "/proc", "/sys"].iter().any(|p| text.contains(p))
        || (escaped && ["dev", "proc", "sys"].iter().any(|p| text.contains(p)))
    {
        return;
    }
    if let Ok(s) = Scenario::from_toml(text) {
        s.check_counts()
            .expect("a parsed scenario passes its own count check");
        let _ = s.warnings();
        let _ = s.flows();
    }
    let _ = Cdf::parse(text);
});
