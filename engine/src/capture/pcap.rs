//! Writing pcap files with nanosecond timestamps (magic 0xa1b23c4d, version 2.4), the
//! classic format every tool reads; written in native byte order as libpcap does.

use crate::out::Result;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub const MAGIC_NANOSECONDS: u32 = 0xa1b2_3c4d;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;

pub struct Writer {
    out: BufWriter<File>,
    path: String,
}

impl Writer {
    pub fn create(path: &Path, snaplen: u32, linktype: u32) -> Result<Writer> {
        let file = File::create(path)
            .map_err(|e| crate::err!(Io, "cannot create {}: {e}", path.display()))?;
        let mut w = Writer {
            out: BufWriter::with_capacity(1 << 20, file),
            path: path.display().to_string(),
        };
        let mut header = Vec::with_capacity(24);
        header.extend(MAGIC_NANOSECONDS.to_ne_bytes());
        header.extend(2u16.to_ne_bytes());
        header.extend(4u16.to_ne_bytes());
        header.extend(0i32.to_ne_bytes()); // thiszone: timestamps are UTC
        header.extend(0u32.to_ne_bytes()); // sigfigs
        header.extend(snaplen.to_ne_bytes());
        header.extend(linktype.to_ne_bytes());
        w.put(&header)?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| crate::err!(Io, "writing {}: {e}", self.path))
    }

    pub fn write(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> Result<()> {
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_ne_bytes());
        rec[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_ne_bytes());
        rec[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        rec[12..16].copy_from_slice(&orig_len.to_ne_bytes());
        self.put(&rec)?;
        self.put(data)
    }

    pub fn finish(mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|e| crate::err!(Io, "writing {}: {e}", self.path))?;
        self.out
            .get_ref()
            .sync_all()
            .map_err(|e| crate::err!(Io, "syncing {}: {e}", self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_layout() {
        let path =
            std::env::temp_dir().join(format!("pqlab-pcap-test-{}.pcap", std::process::id()));
        let mut w = Writer::create(&path, 1500, LINKTYPE_ETHERNET).unwrap();
        w.write(1_700_000_000_123_456_789, &[1, 2, 3], 60).unwrap();
        w.finish().unwrap();
        let b = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(b.len(), 24 + 16 + 3);
        let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        assert_eq!(u32_at(0), MAGIC_NANOSECONDS);
        assert_eq!(u32_at(16), 1500);
        assert_eq!(u32_at(20), LINKTYPE_ETHERNET);
        assert_eq!(u32_at(24), 1_700_000_000);
        assert_eq!(u32_at(28), 123_456_789);
        assert_eq!(u32_at(32), 3);
        assert_eq!(u32_at(36), 60);
        assert_eq!(&b[40..], &[1, 2, 3]);
    }
}
