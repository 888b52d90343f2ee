//! Link the engine's binary (and its unit tests) with the C allocator wrapped, so `heap`
//! can count every heap block of the code linked into it (see src/heap.rs).

fn main() {
    for f in [
        "malloc",
        "calloc",
        "realloc",
        "free",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
    ] {
        println!("cargo:rustc-link-arg-bins=-Wl,--wrap={f}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
