// The static-PIE link of the musl binaries, `include!`d by the build
// scripts of both packages that ship one (build.rs: the node binary;
// controller/build.rs: the controller), so they link alike
// (docs/developer/binary.md). Paths are spelled out: the including file
// keeps its own `use`s.

/// Whether the linker is the linker itself (rust-lld, ld*), which takes its
/// flags bare, or a C compiler driver, which takes them after `-Wl,`: both
/// musl targets link with rust-lld (.cargo/config.toml, pkg.yaml); a build
/// that names `cc` for x86_64 links through GNU ld instead.
fn direct_linker() -> bool {
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_default();
    std::path::PathBuf::from(&linker)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == "rust-lld" || n.starts_with("ld"))
}

/// The value of codegen option `name` in the flags Cargo passes to rustc
/// (`-C name=v` or `-Cname=v`; the last one wins, as in rustc).
fn codegen_option(name: &str) -> Option<String> {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').collect();
    let prefix = format!("{name}=");
    let mut value = None;
    for (i, flag) in flags.iter().enumerate() {
        let option = match flag.strip_prefix("-C") {
            Some("") => flags.get(i + 1).copied().unwrap_or(""),
            Some(rest) => rest,
            None => continue,
        };
        if let Some(v) = option.strip_prefix(&prefix) {
            value = Some(v.to_string());
        }
    }
    value
}

/// The musl binaries are static PIEs (ASLR for the binary's own image),
/// their relative relocations packed as DT_RELR (`-z pack-relative-relocs`):
/// 2-3 KiB of bitmaps instead of ~230 KiB of RELA entries. musl's static-PIE
/// startup (`_dlstart` in rcrt1.o) applies DT_RELR from musl 1.2.4 on, which
/// Rust bundles from 1.93 (Cargo.toml's rust-version). Every profile, so any
/// musl build of the binary is the same kind of executable.
///
/// x86_64: rustc links the target as a static PIE by itself (rcrt1.o,
/// `-static -pie --no-dynamic-linker`) unless `-C relocation-model=static`;
/// only the packing is added here.
///
/// aarch64: rustc's target has no static-PIE support (its spec lacks
/// `static-position-independent-executables`): asked for PIE code, it still
/// links crt1.o, whose `_start` does not relocate, and `-pie` on top gives a
/// DYN that crashes at its first pointer load. So when the flags say
/// `-C relocation-model=pie -C link-self-contained=no` (.cargo/config.toml,
/// pkg.yaml) rustc adds no startup objects, and this links musl's own
/// static-PIE ones (rcrt1.o and the S variants, from the toolchain's
/// self-contained directory, where libc.a is too) with rust-lld's
/// `-pie --no-dynamic-linker`. Without those flags the binary stays the
/// plain static executable rustc makes.
fn link_position_independent() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let target = std::env::var("TARGET")?;
    let model = codegen_option("relocation-model");
    let mut args: Vec<String> = Vec::new();
    match target.as_str() {
        "x86_64-unknown-linux-musl" if model.as_deref() != Some("static") => {
            args.extend(["-z", "pack-relative-relocs"].map(String::from));
        }
        "aarch64-unknown-linux-musl"
            if model.as_deref() == Some("pie")
                && codegen_option("link-self-contained").as_deref() == Some("no") =>
        {
            if !direct_linker() {
                return Err("aarch64 static PIE: link with rust-lld (.cargo/config.toml)".into());
            }
            let rustc = std::env::var("RUSTC")?;
            let out = std::process::Command::new(rustc)
                .args(["--print", "target-libdir", "--target", &target])
                .output()?;
            if !out.status.success() {
                return Err(format!("rustc --print target-libdir failed: {}", out.status).into());
            }
            let libdir = std::path::PathBuf::from(String::from_utf8(out.stdout)?.trim());
            let objects = libdir.join("self-contained");
            println!("cargo:rustc-link-search=native={}", objects.display());
            args.extend(
                [
                    "-pie",
                    "--no-dynamic-linker",
                    "-z",
                    "text",
                    "-z",
                    "pack-relative-relocs",
                ]
                .map(String::from),
            );
            // Startup objects in link order; with rust-lld the order of
            // archives does not matter, and .init of crti/crtn has nothing
            // between them but what musl puts there.
            for o in ["rcrt1.o", "crti.o", "crtbeginS.o", "crtendS.o", "crtn.o"] {
                let path = objects.join(o);
                if !path.is_file() {
                    return Err(format!("no {}", path.display()).into());
                }
                args.push(path.display().to_string());
            }
        }
        _ => return Ok(()),
    }
    // No identical code folding: `--icf=safe` folds nothing here (rustc
    // emits no address-significance table, so lld keeps every function) and
    // `--icf=all` (35,392 B on x86_64) would also fold C functions of musl
    // and ring whose addresses may be compared (docs/developer/binary.md).
    let direct = direct_linker();
    let mut i = 0;
    while i < args.len() {
        // `-z X` is one option: `-Wl,-z,X` through the compiler driver.
        let (arg, step) = match (direct, args[i].as_str()) {
            (true, a) => (a.to_string(), 1),
            (false, "-z") => (format!("-Wl,-z,{}", args.get(i + 1).map_or("", |s| s)), 2),
            (false, a) => (format!("-Wl,{a}"), 1),
        };
        println!("cargo:rustc-link-arg-bins={arg}");
        i += step;
    }
    Ok(())
}

