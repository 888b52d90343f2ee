//! The TLS stacks linked into the library, one folder each. A stack under another licence
//! lives in a program of its own (`engine/wolfssl`) and is passed to `cli::run`.

pub mod openssl;
pub mod rustls;
