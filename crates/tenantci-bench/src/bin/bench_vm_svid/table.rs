//! The Markdown table `scripts/bench-vm-svid.sh` writes into docs/benchmarks/vm-svid.md:
//! nearest-rank percentiles and the mean of each row, with its p50 against row (a)'s, the
//! baseline measured in the same run.

use std::time::Duration;

use crate::{ROWS, WARM_UP};

/// Nearest rank: the smallest value with at least `q` of the values at or below it.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// p50, p90, p99 and mean in ms.
fn stats(times: &[Duration]) -> [f64; 4] {
    let mut v: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    [
        percentile(&v, 0.5),
        percentile(&v, 0.9),
        percentile(&v, 0.99),
        mean,
    ]
}

pub fn print(n: usize, times: &[Vec<Duration>; ROWS]) {
    const NAMES: [&str; ROWS] = [
        "(a) `desired::desired` + Lifecycle API create at the OpenSandbox double, no identity (baseline)",
        "(b) `mint_x509_svid` on the kept-alive channel (one `ServerApi`: the dispatcher's case)",
        "(c) `mint_x509_svid` on a new `ServerApi` (TCP + mTLS handshake + HTTP/2, then the mint)",
        "(d) the client side alone: P-256 key generation + CSR",
        "**(e) (b) then (a) with the SVID in the env: a VM start with identity**",
    ];
    println!(
        "{n} calls per row, one of each row per round (the order rotating), after {WARM_UP} untimed each. Times in ms."
    );
    println!();
    println!("| row | calls | p50 | p90 | p99 | mean | p50 vs (a) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let base = stats(&times[0])[0];
    for (row, name) in NAMES.iter().enumerate() {
        let [p50, p90, p99, mean] = stats(&times[row]);
        let mut ratio = format!("{:.2}x ({:+.3})", p50 / base, p50 - base);
        if row == 4 {
            ratio = format!("**{ratio}**");
        }
        println!("| {name} | {n} | {p50:.3} | {p90:.3} | {p99:.3} | {mean:.3} | {ratio} |");
    }
}
