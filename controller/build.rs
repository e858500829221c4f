//! The controller's musl builds link as the node binary's do: static PIEs
//! with DT_RELR relocations on x86_64 and on aarch64, where rustc's target
//! has no static PIE and a binary linked without musl's rcrt1.o crashes at
//! its first pointer load (link/static_pie.rs, shared with the node crate's
//! build.rs). Host builds are untouched.

include!("../link/static_pie.rs");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../link/static_pie.rs");
    link_position_independent()
}
