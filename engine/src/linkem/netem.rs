//! One direction of the link with the kernel netem qdisc's semantics (net/sched/sch_netem.c):
//! random loss on enqueue (with netem's correlated random source), a queue limit in packets,
//! delay = latency + table[r] * jitter / 8192 (uniform in [-jitter, jitter) without a table),
//! and a rate: time_to_send = max(now + delay, last queued time_to_send) + len * 8 / rate.
//! Packets leave in time_to_send order (netem's tfifo), so jitter without a rate reorders,
//! exactly as netem does. Pure logic, no I/O: the forwarder feeds it clock readings.

use super::tables::{self, Dist, DIST_SCALE};
use serde::Deserialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The profile of one direction, as pqlab's Python side sends it (all integers are exact).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirConfig {
    /// Fixed one-way delay (netem `delay`), nanoseconds.
    #[serde(default)]
    pub latency_ns: i64,
    /// netem `jitter`, nanoseconds.
    #[serde(default)]
    pub jitter_ns: i64,
    /// uniform | normal | pareto | paretonormal.
    #[serde(default = "default_dist")]
    pub dist: String,
    /// Delay correlation in percent (netem's third `delay` argument).
    #[serde(default)]
    pub delay_corr_pct: f64,
    /// Random loss in percent.
    #[serde(default)]
    pub loss_pct: f64,
    /// Loss correlation in percent.
    #[serde(default)]
    pub loss_corr_pct: f64,
    /// Rate in bits per second; 0 = unlimited.
    #[serde(default)]
    pub rate_bps: u64,
    /// Queue limit in packets (netem `limit`, default 1000).
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Bytes added to each packet's length for the rate (a TUN carries IP packets; netem on
    /// a veth sees the 14-byte Ethernet header as well, so pqlab passes 14 to match).
    #[serde(default)]
    pub overhead_bytes: u64,
}

fn default_dist() -> String {
    "uniform".into()
}
fn default_limit() -> usize {
    1000
}

/// xoshiro256**: fast, good enough for emulation, reproducible from a seed.
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut s = [0u64; 4];
        for v in s.iter_mut() {
            // splitmix64 to spread the seed.
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            *v = x ^ (x >> 31);
        }
        Rng(s)
    }
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

/// netem's percentage scaling in tc: rint(fraction * UINT32_MAX).
pub fn percent_to_u32(pct: f64) -> u32 {
    ((pct / 100.0) * u32::MAX as f64).round_ties_even() as u32
}

/// netem's correlated random source (get_crandom).
pub struct Crnd {
    last: u32,
    rho: u32,
}

impl Crnd {
    pub fn new(rho: u32, rng: &mut Rng) -> Crnd {
        Crnd {
            last: rng.next_u32(),
            rho,
        }
    }
    pub fn next(&mut self, rng: &mut Rng) -> u32 {
        let value = rng.next_u32() as u64;
        if self.rho == 0 {
            return value as u32;
        }
        let rho = self.rho as u64 + 1;
        let answer = ((value * ((1u64 << 32) - rho) + self.last as u64 * rho) >> 32) as u32;
        self.last = answer;
        answer
    }
}

/// netem's tabledist: a delay with mean-ish `mu` and spread `sigma` from the table.
pub fn tabledist(mu: i64, sigma: i64, rnd: u32, table: Option<&[i16]>) -> i64 {
    if sigma == 0 {
        return mu;
    }
    match table {
        None => (rnd as i64 % (2 * sigma)) + mu - sigma,
        Some(t) => {
            let t = t[rnd as usize % t.len()] as i64;
            let mut x = (sigma % DIST_SCALE) * t;
            if x >= 0 {
                x += DIST_SCALE / 2;
            } else {
                x -= DIST_SCALE / 2;
            }
            x / DIST_SCALE + (sigma / DIST_SCALE) * t + mu
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Queued; leaves at this time (ns, same clock as `now`).
    Queued(i64),
    /// Dropped by random loss.
    Lost,
    /// Dropped because `limit` packets were already queued.
    QueueFull,
}

struct Entry {
    due: i64,
    seq: u64,
    data: Vec<u8>,
}
impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// One direction: the queue and netem's random state.
pub struct Netem {
    cfg: DirConfig,
    table: Option<Vec<i16>>,
    rng: Rng,
    delay_cor: Crnd,
    loss_cor: Crnd,
    loss: u32,
    queue: BinaryHeap<Reverse<Entry>>,
    /// Latest time_to_send among queued packets (netem's "last" for the rate).
    last_due: Option<i64>,
    seq: u64,
}

impl Netem {
    pub fn new(cfg: DirConfig, seed: u64) -> Result<Netem, String> {
        let dist = Dist::parse(&cfg.dist).ok_or_else(|| {
            format!(
                "distribution {:?} is not one of uniform, normal, pareto, paretonormal",
                cfg.dist
            )
        })?;
        if cfg.latency_ns < 0 || cfg.jitter_ns < 0 {
            return Err("delay and jitter must be 0 or more".into());
        }
        if cfg.jitter_ns > i32::MAX as i64 {
            return Err("jitter above 2.1 s is beyond what netem accepts".into());
        }
        for (name, v) in [
            ("loss", cfg.loss_pct),
            ("loss correlation", cfg.loss_corr_pct),
            ("delay correlation", cfg.delay_corr_pct),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("{name} {v}% is outside 0-100%"));
            }
        }
        if cfg.limit == 0 {
            return Err("queue limit must be at least 1 packet".into());
        }
        let mut rng = Rng::new(seed);
        let delay_cor = Crnd::new(percent_to_u32(cfg.delay_corr_pct), &mut rng);
        let loss_cor = Crnd::new(percent_to_u32(cfg.loss_corr_pct), &mut rng);
        Ok(Netem {
            table: tables::table(dist),
            loss: percent_to_u32(cfg.loss_pct),
            cfg,
            rng,
            delay_cor,
            loss_cor,
            queue: BinaryHeap::new(),
            last_due: None,
            seq: 0,
        })
    }

    /// Serialisation time of a packet of `len` bytes at the configured rate.
    pub fn packet_time_ns(&self, len: usize) -> i64 {
        if self.cfg.rate_bps == 0 {
            return 0;
        }
        let bits = (len as u128 + self.cfg.overhead_bytes as u128) * 8;
        (bits * 1_000_000_000 / self.cfg.rate_bps as u128) as i64
    }

    /// Offer a packet that arrived at `now`; netem_enqueue's order: loss, limit, delay, rate.
    pub fn enqueue(&mut self, now: i64, data: Vec<u8>) -> (Verdict, Option<Vec<u8>>) {
        if self.loss != 0 && self.loss >= self.loss_cor.next(&mut self.rng) {
            return (Verdict::Lost, Some(data));
        }
        if self.queue.len() >= self.cfg.limit {
            return (Verdict::QueueFull, Some(data));
        }
        let rnd = if self.cfg.jitter_ns != 0 {
            self.delay_cor.next(&mut self.rng)
        } else {
            0
        };
        let mut delay = tabledist(
            self.cfg.latency_ns,
            self.cfg.jitter_ns,
            rnd,
            self.table.as_deref(),
        );
        let mut base = now;
        if self.cfg.rate_bps != 0 {
            if let Some(last) = self.last_due {
                delay -= last - now;
                delay = delay.max(0);
                base = last;
            }
            delay += self.packet_time_ns(data.len());
        }
        let due = base + delay;
        self.last_due = Some(self.last_due.map_or(due, |l| l.max(due)));
        self.seq += 1;
        self.queue.push(Reverse(Entry {
            due,
            seq: self.seq,
            data,
        }));
        (Verdict::Queued(due), None)
    }

    /// Time the head of the queue is due, if any.
    pub fn next_due(&self) -> Option<i64> {
        self.queue.peek().map(|Reverse(e)| e.due)
    }

    /// Take the head if it is due at `now`: (due time, packet).
    pub fn dequeue_due(&mut self, now: i64) -> Option<(i64, Vec<u8>)> {
        if self.next_due()? > now {
            return None;
        }
        let Reverse(e) = self.queue.pop()?;
        if self.queue.is_empty() {
            self.last_due = None;
        }
        Some((e.due, e.data))
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DirConfig {
        serde_json::from_str("{}").unwrap()
    }

    #[test]
    fn fixed_delay_and_fifo() {
        let mut c = cfg();
        c.latency_ns = 25_000_000;
        let mut n = Netem::new(c, 1).unwrap();
        assert_eq!(n.enqueue(100, vec![0; 100]).0, Verdict::Queued(25_000_100));
        assert_eq!(n.enqueue(200, vec![1; 100]).0, Verdict::Queued(25_000_200));
        assert!(n.dequeue_due(25_000_099).is_none());
        assert_eq!(n.dequeue_due(25_000_100).unwrap().1[0], 0);
        assert_eq!(n.dequeue_due(30_000_000).unwrap().1[0], 1);
    }

    #[test]
    fn rate_serialises_back_to_back() {
        let mut c = cfg();
        c.rate_bps = 1_000_000;
        c.overhead_bytes = 14;
        let mut n = Netem::new(c, 1).unwrap();
        // 1486 + 14 bytes at 1 Mbit/s = 12 ms each, queued behind each other.
        assert_eq!(n.enqueue(0, vec![0; 1486]).0, Verdict::Queued(12_000_000));
        assert_eq!(n.enqueue(1, vec![0; 1486]).0, Verdict::Queued(24_000_000));
        // Once the queue drains, "last" is forgotten: a late packet starts afresh.
        n.dequeue_due(i64::MAX);
        n.dequeue_due(i64::MAX);
        assert_eq!(
            n.enqueue(50_000_000, vec![0; 1486]).0,
            Verdict::Queued(62_000_000)
        );
    }

    #[test]
    fn limit_and_loss() {
        let mut c = cfg();
        c.limit = 2;
        let mut n = Netem::new(c.clone(), 1).unwrap();
        n.enqueue(0, vec![]);
        n.enqueue(0, vec![]);
        assert_eq!(n.enqueue(0, vec![]).0, Verdict::QueueFull);
        c.limit = 1000;
        c.loss_pct = 100.0;
        let mut n = Netem::new(c.clone(), 1).unwrap();
        assert!((0..100).all(|_| n.enqueue(0, vec![]).0 == Verdict::Lost));
        c.loss_pct = 10.0;
        let mut n = Netem::new(c, 7).unwrap();
        let lost = (0..100_000)
            .filter(|_| {
                let v = n.enqueue(0, vec![]).0;
                n.dequeue_due(i64::MAX);
                v == Verdict::Lost
            })
            .count();
        assert!((9_500..10_500).contains(&lost), "lost {lost}");
    }

    #[test]
    fn uniform_jitter_bounds() {
        let mut c = cfg();
        c.latency_ns = 10_000_000;
        c.jitter_ns = 2_000_000;
        let mut n = Netem::new(c, 3).unwrap();
        for _ in 0..10_000 {
            if let Verdict::Queued(d) = n.enqueue(0, vec![]).0 {
                assert!((8_000_000..12_000_000).contains(&d));
            }
            n.dequeue_due(i64::MAX);
        }
    }

    #[test]
    fn tabledist_matches_kernel_rounding() {
        let t = tables::table(Dist::Normal).unwrap();
        // sigma a multiple of 8192: exact product (the kernel's rounding term,
        // (rnd * 0 + 4096) / 8192, is 0 here).
        assert_eq!(tabledist(0, 8192, 0, Some(&t)), t[0] as i64);
        assert_eq!(tabledist(5, 0, 123, Some(&t)), 5);
    }

    #[test]
    fn tables_have_netem_shape() {
        let n = tables::table(Dist::Normal).unwrap();
        assert_eq!(n.len(), 4096);
        // iproute2's normal.dist starts -32768 -28307 -26871 -25967 and is symmetric.
        assert_eq!(&n[..4], &[-32768, -28307, -26871, -25967]);
        assert!(n.windows(2).all(|w| w[0] <= w[1]));
        let p = tables::table(Dist::Pareto).unwrap();
        assert_eq!(p.len(), 4096);
        // iproute2's pareto.dist: -5461 -5460 -5460 -5459 ... 32767.
        assert_eq!(&p[..4], &[-5461, -5460, -5460, -5459]);
        assert_eq!(*p.last().unwrap(), 32767);
        let pn = tables::table(Dist::ParetoNormal).unwrap();
        assert_eq!(pn.len(), 4096);
        // iproute2's paretonormal.dist: -12305 -11171 -10812 ... 31365 31789.
        assert_eq!(&pn[..3], &[-12305, -11171, -10812]);
        assert_eq!(&pn[4094..], &[31365, 31789]);
        assert_eq!(&n[4094..], &[27159, 28858]);
        assert!(tables::table(Dist::Uniform).is_none());
    }
}
