//! Fuzz the auto lexer (and everything downstream: parse, lines, every view, events).
#![no_main]

use libfuzzer_sys::fuzz_target;
use memex_vcc::{CompileOptions, InputFormat, Lines, Literal, UiOptions, compile_trace, trace_events};

fuzz_target!(|data: &[u8]| {
    let format = InputFormat::Auto;
    let opts = CompileOptions { format, strict: false };
    let Ok(trace) = compile_trace(data, "fuzz", opts) else { return };
    let search = Literal::new("e", true).map(Lines).ok();
    for chain in trace.chains() {
        let _ = chain.full_view();
        let _ = chain.ui_view(&UiOptions { truncate: 4, truncate_user: 8 });
        if let Some(p) = &search {
            let _ = chain.adaptive_view(p);
        }
    }
    let _ = trace_events(data, format, false);
});
