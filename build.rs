//! Generates the gRPC code from `proto/` without a system `protoc`: `protox`
//! parses the files in pure Rust, tonic/prost generate the types and stubs,
//! pbjson generates the proto3 JSON mapping used by `-o json`.

use std::{env, error::Error, fs, path::PathBuf};

use prost::Message;

const API: &str = "proto/sandbox_readiness/v1/readiness.proto";
const CRI: &str = "proto/runtime/v1/api.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    link_without_unwind_tables()?;
    let out = PathBuf::from(env::var("OUT_DIR")?);

    // The API alone (with its imports) feeds server reflection, so grpcurl
    // sees our service and not the CRI subset we only call.
    let api = protox::compile([API], ["proto"])?;
    let api_bytes = api.encode_to_vec();
    fs::write(out.join("readiness_descriptor.bin"), &api_bytes)?;

    tonic_prost_build::configure()
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .compile_fds(api)?;

    // The CRI subset: the agent is only ever a CRI client. The server stubs
    // go to a directory of their own that only the tests include (a fake
    // runtime in tests/cri_live.rs), so they never reach the node binary.
    let cri = protox::compile([CRI], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(cri.clone())?;
    let server_dir = out.join("cri-server");
    fs::create_dir_all(&server_dir)?;
    tonic_prost_build::configure()
        .build_client(false)
        .out_dir(&server_dir)
        .compile_fds(cri)?;

    pbjson_build::Builder::new()
        .register_descriptors(&api_bytes)?
        // Print false/0/empty fields too: a report that says
        // "initialUserNamespace": false is clearer than one that omits it.
        .emit_fields()
        .build(&[".sandbox_readiness"])?;
    Ok(())
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
    // x86_64 links through the C compiler driver (flags after -Wl,); aarch64
    // through rust-lld itself (.cargo/config.toml), which takes them bare.
    let linker = env::var("RUSTC_LINKER").unwrap_or_default();
    let direct = PathBuf::from(&linker)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == "rust-lld" || n.starts_with("ld"));
    let args = if direct {
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
