//! netem's delay distribution tables, generated the way iproute2's `netem/` programs
//! generate the `.dist` files that `tc` loads: 4096 signed 16-bit entries, the inverse CDF
//! of a zero-mean, unit-"sigma" distribution scaled by NETEM_DIST_SCALE (8192), sampled at
//! every 4th of 16384 points. A delay is then `latency + table[r % 4096] * jitter / 8192`.

/// NETEM_DIST_SCALE from <linux/pkt_sched.h>.
pub const DIST_SCALE: i64 = 8192;
const TABLESIZE: usize = 16384;
/// Entries in each table (TABLESIZE / 4).
pub const TABLE_LEN: usize = TABLESIZE / 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    Uniform,
    Normal,
    Pareto,
    ParetoNormal,
}

impl Dist {
    pub fn parse(name: &str) -> Option<Dist> {
        match name {
            "uniform" => Some(Dist::Uniform),
            "normal" => Some(Dist::Normal),
            "pareto" => Some(Dist::Pareto),
            "paretonormal" => Some(Dist::ParetoNormal),
            _ => None,
        }
    }
}

extern "C" {
    // libm's erf: the same function iproute2's generator calls, so the tables match bit for bit.
    fn erf(x: f64) -> f64;
}

fn normal_cdf(x: f64) -> f64 {
    // SAFETY: erf is a pure libm function on a finite double.
    0.5 + 0.5 * unsafe { erf(x / 2f64.sqrt()) }
}

/// The inverse normal CDF on the 16385-point grid, as normal.c builds it: for each x on a
/// fine grid the last x that rounds to an index wins.
fn normal_grid() -> Vec<f64> {
    let mut table = vec![0.0f64; TABLESIZE + 1];
    let mut x = -10.0f64;
    // Same float accumulation as the C loop `for (x = -10.0; x < 10.05; x += .00005)`.
    while x < 10.05 {
        let i = (TABLESIZE as f64 * normal_cdf(x)).round_ties_even() as usize;
        table[i] = x;
        x += 0.00005;
    }
    table
}

fn clamp_short(v: i64) -> i16 {
    v.clamp(i16::MIN as i64, i16::MAX as i64) as i16
}

fn pareto_value(i: usize) -> i64 {
    // pareto.c / paretonormal.c: alpha 3, shifted by 1.5 (the mean) and scaled by 4/3.
    let k = 65536 - 4 * i as i64;
    let mut d = k as f64 / 65536.0;
    d = 1.0 / d.powf(1.0 / 3.0);
    d -= 1.5;
    d *= (4.0 / 3.0) * DIST_SCALE as f64;
    if d > 32767.0 {
        d = 32767.0;
    }
    d.round_ties_even() as i64
}

/// The 4096-entry table of `dist` (None for uniform, which netem draws without a table).
pub fn table(dist: Dist) -> Option<Vec<i16>> {
    match dist {
        Dist::Uniform => None,
        Dist::Normal => {
            let grid = normal_grid();
            Some(
                (0..TABLESIZE)
                    .step_by(4)
                    .map(|i| clamp_short((grid[i] * DIST_SCALE as f64).round_ties_even() as i64))
                    .collect(),
            )
        }
        Dist::Pareto => Some(
            (0..TABLE_LEN)
                .map(|j| clamp_short(pareto_value(4 * j)))
                .collect(),
        ),
        Dist::ParetoNormal => {
            let grid = normal_grid();
            Some(
                (0..TABLESIZE)
                    .step_by(4)
                    .map(|i| {
                        let norm = (grid[i] * DIST_SCALE as f64).round_ties_even() as i64;
                        let par = pareto_value(i);
                        // C integer division truncates toward zero, as Rust's does.
                        clamp_short((norm + 3 * par) / 4)
                    })
                    .collect(),
            )
        }
    }
}
