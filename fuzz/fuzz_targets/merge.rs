//! Merging the runner entry into any config.toml text must never panic: it returns a new
//! document (which a second merge leaves unchanged) or a bad-input error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tenantci_runner::gitlab::config::merge::fuzz_merge(data);
});
