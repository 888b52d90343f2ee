//! The classic BPF program for `tcp port P` (IPv4 and IPv6), for Ethernet or bare-IP
//! (TUN) framing: the same logic tcpdump compiles, built here so the engine needs no libpcap.

/// How packets on the interface are framed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Framing {
    Ethernet,
    RawIp,
}

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const ALU_AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

#[derive(Clone, Copy)]
enum Target {
    Next,
    Ipv4,
    Ipv6,
    Accept,
    Reject,
}

enum Op {
    Stmt(u16, u32),
    Jump(u16, u32, Target, Target),
    Label(Target),
}

/// Build the filter; accepted packets are truncated to `snaplen` by the kernel.
pub fn tcp_port(framing: Framing, port: u16, snaplen: u32) -> Vec<Insn> {
    use Op::*;
    use Target::*;
    let l = match framing {
        Framing::Ethernet => 14u32,
        Framing::RawIp => 0,
    };
    let p = port as u32;
    let mut ops = Vec::new();
    match framing {
        Framing::Ethernet => {
            ops.push(Stmt(LD_H_ABS, 12));
            ops.push(Jump(JEQ_K, 0x86dd, Ipv6, Next));
            ops.push(Jump(JEQ_K, 0x0800, Ipv4, Reject));
        }
        Framing::RawIp => {
            ops.push(Stmt(LD_B_ABS, 0));
            ops.push(Stmt(ALU_AND_K, 0xf0));
            ops.push(Jump(JEQ_K, 0x60, Ipv6, Next));
            ops.push(Jump(JEQ_K, 0x40, Ipv4, Reject));
        }
    }
    ops.extend([
        Label(Ipv6),
        Stmt(LD_B_ABS, l + 6), // next header (no extension headers: pqlab sends none)
        Jump(JEQ_K, 6, Next, Reject),
        Stmt(LD_H_ABS, l + 40),
        Jump(JEQ_K, p, Accept, Next),
        Stmt(LD_H_ABS, l + 42),
        Jump(JEQ_K, p, Accept, Reject),
        Label(Ipv4),
        Stmt(LD_B_ABS, l + 9), // protocol
        Jump(JEQ_K, 6, Next, Reject),
        Stmt(LD_H_ABS, l + 6), // fragment offset: only first fragments carry ports
        Jump(JSET_K, 0x1fff, Reject, Next),
        Stmt(LDX_B_MSH, l), // X = IP header length
        Stmt(LD_H_IND, l),
        Jump(JEQ_K, p, Accept, Next),
        Stmt(LD_H_IND, l + 2),
        Jump(JEQ_K, p, Accept, Reject),
        Label(Accept),
        Stmt(RET_K, snaplen),
        Label(Reject),
        Stmt(RET_K, 0),
    ]);
    // Resolve labels to instruction indexes, then to relative jump offsets.
    let mut index = Vec::new();
    let mut at = 0usize;
    let mut labels = std::collections::HashMap::new();
    for op in &ops {
        match op {
            Label(t) => {
                labels.insert(*t as u8, at);
            }
            _ => {
                index.push(at);
                at += 1;
            }
        }
    }
    let mut out = Vec::new();
    for op in &ops {
        let here = out.len();
        let rel = |t: &Target| -> u8 {
            let dest = match t {
                Next => here + 1,
                other => labels[&(*other as u8)],
            };
            (dest - here - 1) as u8
        };
        match op {
            Label(_) => {}
            Stmt(code, k) => out.push(Insn {
                code: *code,
                jt: 0,
                jf: 0,
                k: *k,
            }),
            Jump(code, k, t, f) => out.push(Insn {
                code: *code,
                jt: rel(t),
                jf: rel(f),
                k: *k,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal interpreter of the instructions used above, to test the program.
    fn run(prog: &[Insn], pkt: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let byte = |i: usize| pkt.get(i).copied();
        let half = |i: usize| Some(((byte(i)? as u32) << 8) | byte(i + 1)? as u32);
        loop {
            let insn = prog[pc];
            pc += 1;
            match insn.code {
                LD_H_ABS => match half(insn.k as usize) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LD_B_ABS => match byte(insn.k as usize) {
                    Some(v) => a = v as u32,
                    None => return 0,
                },
                LD_H_IND => match half((x + insn.k) as usize) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LDX_B_MSH => match byte(insn.k as usize) {
                    Some(v) => x = 4 * (v as u32 & 0xf),
                    None => return 0,
                },
                ALU_AND_K => a &= insn.k,
                JEQ_K => pc += if a == insn.k { insn.jt } else { insn.jf } as usize,
                JSET_K => pc += if a & insn.k != 0 { insn.jt } else { insn.jf } as usize,
                RET_K => return insn.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn ipv4_tcp(proto: u8, sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut ip = vec![
            0x45,
            0,
            0,
            40,
            0,
            0,
            (frag >> 8) as u8,
            frag as u8,
            64,
            proto,
        ];
        ip.extend([0; 10]);
        ip.extend(sport.to_be_bytes());
        ip.extend(dport.to_be_bytes());
        ip.extend([0; 16]);
        ip
    }

    fn ether(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0; 12];
        f.extend(ethertype.to_be_bytes());
        f.extend(payload);
        f
    }

    #[test]
    fn ethernet_ipv4_ports_both_directions() {
        let prog = tcp_port(Framing::Ethernet, 4433, 1000);
        assert_eq!(
            run(&prog, &ether(0x0800, &ipv4_tcp(6, 4433, 50000, 0))),
            1000
        );
        assert_eq!(
            run(&prog, &ether(0x0800, &ipv4_tcp(6, 50000, 4433, 0x4000))),
            1000
        );
        assert_eq!(run(&prog, &ether(0x0800, &ipv4_tcp(6, 1, 2, 0))), 0);
        assert_eq!(run(&prog, &ether(0x0800, &ipv4_tcp(17, 4433, 2, 0))), 0);
        assert_eq!(run(&prog, &ether(0x0806, &ipv4_tcp(6, 4433, 2, 0))), 0);
        // A non-first fragment has no TCP header: rejected.
        assert_eq!(run(&prog, &ether(0x0800, &ipv4_tcp(6, 4433, 2, 5))), 0);
    }

    #[test]
    fn ipv4_options_shift_the_ports() {
        let prog = tcp_port(Framing::RawIp, 443, 99);
        let mut ip = ipv4_tcp(6, 1, 443, 0);
        ip[0] = 0x46; // 24-byte header: the ports move by 4
        assert_eq!(run(&prog, &ip), 0);
        ip.splice(20..20, [0u8; 4]);
        assert_eq!(run(&prog, &ip), 99);
    }

    #[test]
    fn ipv6_and_raw_framing() {
        let mut ip6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        ip6.extend([0; 32]);
        ip6.extend(8443u16.to_be_bytes());
        ip6.extend(1234u16.to_be_bytes());
        ip6.extend([0; 16]);
        assert_eq!(run(&tcp_port(Framing::RawIp, 8443, 7), &ip6), 7);
        assert_eq!(run(&tcp_port(Framing::RawIp, 8444, 7), &ip6), 0);
        assert_eq!(
            run(&tcp_port(Framing::Ethernet, 1234, 7), &ether(0x86dd, &ip6)),
            7
        );
        assert_eq!(
            run(&tcp_port(Framing::RawIp, 4433, 7), &ipv4_tcp(6, 4433, 1, 0)),
            7
        );
    }
}
