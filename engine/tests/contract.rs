//! The contract suite (`pqlab_engine::tls::contract`) for every stack linked into the
//! library, as `tls::registry::library()` lists them.

pqlab_engine::contract_suite!();
