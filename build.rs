//! Link arguments of the shipped static binaries: no unwind tables, and
//! position independence (static PIE with DT_RELR relocations) on both musl
//! targets (docs/developer/binary.md). The protobuf and gRPC
//! code is not generated here: it is committed under `src/proto/generated/`
//! (see `src/proto/mod.rs`), so a build compiles no code generator.

use std::{env, error::Error, path::PathBuf};

// direct_linker, codegen_option and link_position_independent: shared with
// the controller's build script, whose musl binaries link the same way.
include!("link/static_pie.rs");

fn main() -> Result<(), Box<dyn Error>> {
    link_without_unwind_tables()?;
    link_position_independent()
}

/// The shipped static binaries (`--profile ship`, both musl targets) leave
/// out their unwind tables (`link/discard-eh-frame.ld` says why): here rather
/// than in RUSTFLAGS, so the local build, the extension recipe (pkg.yaml) and
/// a plain `cargo build --profile ship --target <arch>-unknown-linux-musl`
/// link the same binary. Only `ship` sets `panic = "abort"`, so only its
/// binaries lose them: `release` and debug builds unwind on panic and keep
/// theirs.
fn link_without_unwind_tables() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=link");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let target = env::var("TARGET")?;
    let musl = matches!(
        target.as_str(),
        "x86_64-unknown-linux-musl" | "aarch64-unknown-linux-musl"
    );
    if !musl || profile_name()?.as_deref() != Some("ship") {
        return Ok(());
    }
    let script = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("link/discard-eh-frame.ld");
    let args = if direct_linker() {
        vec![
            "--no-eh-frame-hdr".to_string(),
            "-T".to_string(),
            script.display().to_string(),
        ]
    } else {
        vec![
            "-Wl,--no-eh-frame-hdr".to_string(),
            format!("-Wl,-T,{}", script.display()),
        ]
    };
    for arg in args {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    Ok(())
}

/// The name of the profile being built. Cargo's `PROFILE` says only
/// `release` or `debug` (what the profile inherits), so the name comes from
/// the build script's output directory, which Cargo lays out as
/// `<target-dir>/[<triple>/]<profile>/build/<package>-<hash>/out`.
fn profile_name() -> Result<Option<String>, Box<dyn Error>> {
    let out = PathBuf::from(env::var("OUT_DIR")?);
    Ok(out
        .ancestors()
        .nth(3)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .map(str::to_string))
}
