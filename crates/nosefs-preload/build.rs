//! Builds the C entry points whose signatures Rust cannot define: libc's variadic functions.

fn main() {
    println!("cargo:rerun-if-changed=src/variadic.c");
    cc::Build::new()
        .file("src/variadic.c")
        .flag_if_supported("-fvisibility=default")
        .warnings(true)
        .compile("nosefs_variadic");
}
