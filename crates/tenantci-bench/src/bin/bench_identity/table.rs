//! The bench's figures: nearest-rank percentiles of each path's call times, and the two
//! Markdown tables (kept-alive connections; a new connection per call), with each path's
//! difference and ratio to path (a), the default, measured in the same run.

use std::time::Duration;

/// One path's call times.
#[derive(Default)]
pub struct Series {
    /// Each round's first call (with the connection and the handshake).
    pub first: Vec<Duration>,
    /// The calls after it on the same connection (fresh rows: every call, each on its own).
    pub steady: Vec<Duration>,
}

pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

fn ms(d: &Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest rank: the smallest value with at least `q` of the values at or below it.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn stats(v: &[Duration]) -> Stats {
    let mut v: Vec<f64> = v.iter().map(ms).collect();
    v.sort_by(f64::total_cmp);
    Stats {
        n: v.len(),
        p50: percentile(&v, 0.5),
        p90: percentile(&v, 0.9),
        p99: percentile(&v, 0.99),
        max: *v.last().unwrap(),
    }
}

pub struct Results {
    pub calls: usize,
    pub rounds: usize,
    pub fresh: usize,
    pub a: Series,
    pub b: Series,
    pub c: Series,
    pub d: Series,
    pub a_full: Series,
    pub b_full: Series,
    pub a_resumable: Series,
    pub b_resumable: Series,
    /// Whether a second connection resumed the first one's TLS session (probe).
    pub a_resumes: bool,
    pub b_resumes: bool,
}

fn vs(x: f64, base: f64) -> String {
    format!("{:.2}x ({:+.3})", x / base, x - base)
}

fn row(label: &str, s: &Stats, extra: &[String]) -> String {
    let mut cells = vec![
        label.to_string(),
        s.n.to_string(),
        format!("{:.3}", s.p50),
        format!("{:.3}", s.p90),
        format!("{:.3}", s.p99),
        format!("{:.3}", s.max),
    ];
    cells.extend_from_slice(extra);
    format!("| {} |", cells.join(" | "))
}

pub fn print(r: &Results) {
    let a = stats(&r.a.steady);
    print_kept_alive(r, &a);
    print_identity_cost(r);
    print_fresh(r, &a);
}

/// Step 1: the kept-alive table, each path against path (a).
fn print_kept_alive(r: &Results, a: &Stats) {
    let a_first = stats(&r.a.first);
    println!(
        "Kept-alive: {} UpdateLog calls per path in {} rounds; each round a new client (and \
         proxy), its first call apart. Times in ms.\n",
        r.calls, r.rounds
    );
    println!(
        "| path | calls | p50 | p90 | p99 | max | first call (median of {}) | p50 vs (a) | p99 vs (a) | first vs (a) |",
        r.rounds
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let paths = [
        (
            "(a) server-only TLS, direct to the facade (capability)",
            &r.a,
        ),
        ("(b) SPIFFE mTLS, direct (task SVID + capability)", &r.b),
        (
            "(c) `executor-proxy`, identity on (the executor's path)",
            &r.c,
        ),
        (
            "(d) `executor-proxy`, identity off (today's executor path)",
            &r.d,
        ),
    ];
    for (label, series) in paths {
        let s = stats(&series.steady);
        let f = stats(&series.first);
        println!(
            "{}",
            row(
                label,
                &s,
                &[
                    format!("{:.3}", f.p50),
                    vs(s.p50, a.p50),
                    vs(s.p99, a.p99),
                    vs(f.p50, a_first.p50),
                ]
            )
        );
    }
}

/// Step 2: the kept-alive row comparing (c) with (d), the cost of identity on the executor path.
fn print_identity_cost(r: &Results) {
    let (c, d) = (stats(&r.c.steady), stats(&r.d.steady));
    let (c_first, d_first) = (stats(&r.c.first), stats(&r.d.first));
    println!(
        "| **(c) vs (d)**: identity on the executor path | | | | | | | **{}** | **{}** | **{}** |",
        vs(c.p50, d.p50),
        vs(c.p99, d.p99),
        vs(c_first.p50, d_first.p50)
    );
}

/// Step 3: the new-connection-per-call table.
fn print_fresh(r: &Results, a: &Stats) {
    println!(
        "\nA new connection per call: {} UpdateLog calls per row, direct to the facade. Times \
         in ms; the last column is what the connection costs over the kept-alive p50 of the \
         same path.\n",
        r.fresh
    );
    println!("| path | calls | p50 | p90 | p99 | max | p50 vs (a) full | p50 - kept-alive p50 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let a_full = stats(&r.a_full.steady);
    let b = stats(&r.b.steady);
    let resumed = |yes: bool| if yes { "resumed" } else { "not resumed: full" };
    let fresh = [
        (
            "(a) server-only TLS, full handshake".to_string(),
            &r.a_full,
            a.p50,
        ),
        (
            "(b) SPIFFE mTLS, full handshake".to_string(),
            &r.b_full,
            b.p50,
        ),
        (
            format!(
                "(a) server-only TLS, resumption offered ({} handshake)",
                resumed(r.a_resumes)
            ),
            &r.a_resumable,
            a.p50,
        ),
        (
            format!(
                "(b) SPIFFE mTLS, resumption offered ({} handshake)",
                resumed(r.b_resumes)
            ),
            &r.b_resumable,
            b.p50,
        ),
    ];
    for (label, series, kept) in fresh {
        let s = stats(&series.steady);
        println!(
            "{}",
            row(
                &label,
                &s,
                &[vs(s.p50, a_full.p50), format!("{:.3}", s.p50 - kept)]
            )
        );
    }
}
