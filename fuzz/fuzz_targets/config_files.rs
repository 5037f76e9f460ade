//! A `tagma.toml` from arbitrary text: parsed and validated, or refused with an error that
//! names the key — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagma_config::Config;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Config::from_toml(text);
    }
});
