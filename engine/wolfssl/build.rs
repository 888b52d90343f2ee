//! Link the static wolfSSL that scripts/build-wolfssl.sh built (build/wolfssl, or
//! $PQLAB_WOLFSSL_DIR), compile the small C shim against its headers, and wrap the C
//! allocator as pqlab-engine does (see the engine library's `heap`).

use std::path::PathBuf;

fn main() {
    let dir = std::env::var_os("PQLAB_WOLFSSL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build/wolfssl"));
    let lib = dir.join("lib/libwolfssl.a");
    if !lib.is_file() {
        panic!(
            "{} is missing: build wolfSSL first with scripts/build-wolfssl.sh (make engine does)",
            lib.display()
        );
    }
    // Where wolfSSL's own programs are (the stack's `tools` in `info`).
    let absolute = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    println!("cargo:rustc-env=PQLAB_WOLFSSL_DIR={}", absolute.display());
    // How that wolfSSL was configured, for every run's metadata (the stack's `info`).
    let options = std::fs::read_to_string(dir.join("options.txt")).unwrap_or_default();
    println!(
        "cargo:rustc-env=PQLAB_WOLFSSL_OPTIONS={}",
        options.trim().replace('\n', "\\n")
    );
    cc::Build::new()
        .file("src/shim.c")
        .include(dir.join("include"))
        .warnings(true)
        .compile("pqlab_wolf_shim");
    println!(
        "cargo:rustc-link-search=native={}",
        dir.join("lib").display()
    );
    println!("cargo:rustc-link-lib=static=wolfssl");
    println!("cargo:rustc-link-lib=m");
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
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed={}", lib.display());
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("options.txt").display()
    );
    println!("cargo:rerun-if-env-changed=PQLAB_WOLFSSL_DIR");
}
