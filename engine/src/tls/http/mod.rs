//! HTTP/1.1 over a TLS session, just enough of it: the request a client sends and the
//! response it reads (`response`), the requests a server reads and the data pattern both
//! sides fill and check (`request`).

pub mod request;
pub mod response;
