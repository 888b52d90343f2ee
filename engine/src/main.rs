//! `pqlab-engine`: the engine library with its own stacks (OpenSSL, rustls) and the C
//! allocator counted (see `heap`).

pqlab_engine::count_c_allocator!();

fn main() {
    pqlab_engine::cli::run(pqlab_engine::cli::Program {
        name: "pqlab-engine",
        stacks: &[],
    });
}

#[cfg(test)]
mod tests {
    use pqlab_engine::heap::{self, Source};

    #[test]
    fn every_c_allocation_of_a_thread_is_counted_while_counting() {
        heap::count_malloc(true);
        std::thread::spawn(|| unsafe {
            use std::hint::black_box; // keep the compiler from eliding the allocations
            heap::thread_reset();
            let v: Vec<u8> = black_box(Vec::with_capacity(1000)); // Rust's allocator
            let p = black_box(libc::malloc(5000)); // C code's
            let c = heap::thread_counts(Source::Malloc);
            assert_eq!(c.allocations, 2);
            assert!(c.in_use >= 6000 && c.in_use < 6200, "{c:?}");
            let q = black_box(libc::realloc(p, 20000));
            assert!(heap::thread_counts(Source::Malloc).in_use >= 21000);
            libc::free(q);
            drop(v);
            let c = heap::thread_counts(Source::Malloc);
            assert_eq!(
                (c.allocations, c.frees, c.reallocations, c.in_use),
                (2, 2, 1, 0)
            );
            assert!(c.peak >= 21000 && c.total_bytes >= 21000, "{c:?}");
        })
        .join()
        .unwrap();
        heap::count_malloc(false);
    }
}
