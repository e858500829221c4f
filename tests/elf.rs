//! The ELF facts of the two shipped static binaries (`--profile ship`, the
//! builds the size gate measures and the extension carries), read from their
//! ELF header, program headers and dynamic section
//! (docs/developer/binary.md says how each is linked):
//!
//! | | x86_64 | aarch64 |
//! |---|---|---|
//! | ELF type | DYN: static PIE, rustc's default for the target | DYN: static PIE linked by build.rs (rustc's target has none) |
//! | PT_INTERP | none | none |
//! | dynamic section | DT_RELR, `FLAGS_1` PIE, no DT_NEEDED, no TEXTREL | the same |
//!
//! A static PIE relocates itself in musl's `_dlstart` (rcrt1.o) before main;
//! a DYN linked with crt1.o, or one whose DT_RELR its libc cannot apply
//! (musl < 1.2.4), still passes readelf and crashes at its first pointer
//! load, so each binary also has to start and print its version (aarch64
//! under qemu-aarch64-static; tests/kernels.rs boots both on real kernels).
//!
//! Slow tier: it needs the shipped builds (scripts/test.sh makes them before
//! that tier; `EXTENSION_TARGET_DIR` names another target directory).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use support::testenv;

const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_TEXTREL: i64 = 22;
const DT_RELRSZ: i64 = 35;
const DT_RELR: i64 = 36;
const DT_FLAGS_1: i64 = 0x6fff_fffb;
const DF_1_PIE: u64 = 0x0800_0000;

/// Run-time relocations left in RELA form (x86_64, bytes). With RELR the
/// relative relocations, 237,888 B of RELA before, shrink to a few KiB of
/// bitmaps; what stays RELA is the handful that are not relative.
const RELA_LIMIT: u64 = 4096;

struct Elf {
    kind: u16,
    machine: u16,
    program_headers: Vec<u32>,
    /// (tag, value) of every entry of PT_DYNAMIC, DT_NULL excluded.
    dynamic: Vec<(i64, u64)>,
}

impl Elf {
    fn read(path: &Path) -> Elf {
        let bytes = std::fs::read(path).unwrap();
        Elf::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// A 64-bit little-endian ELF file: header, program header types and the
    /// dynamic section that PT_DYNAMIC points at.
    fn parse(bytes: &[u8]) -> Result<Elf, String> {
        let at = |o: usize, n: usize| {
            bytes
                .get(o..o + n)
                .ok_or_else(|| format!("truncated at {o:#x}"))
        };
        let u16_at = |o| at(o, 2).map(|b| u16::from_le_bytes(b.try_into().unwrap()));
        let u32_at = |o| at(o, 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        let u64_at = |o| at(o, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        if at(0, 4)? != b"\x7fELF" {
            return Err("not an ELF file".into());
        }
        if at(4, 2)? != [2, 1] {
            return Err("not a 64-bit little-endian ELF file".into());
        }
        let kind = u16_at(0x10)?;
        let machine = u16_at(0x12)?;
        let phoff = usize::try_from(u64_at(0x20)?).unwrap();
        let phentsize = usize::from(u16_at(0x36)?);
        let phnum = usize::from(u16_at(0x38)?);
        let mut program_headers = Vec::new();
        let mut dynamic = Vec::new();
        for i in 0..phnum {
            let ph = phoff + i * phentsize;
            let p_type = u32_at(ph)?;
            program_headers.push(p_type);
            if p_type == PT_DYNAMIC {
                let offset = usize::try_from(u64_at(ph + 8)?).unwrap();
                let size = usize::try_from(u64_at(ph + 32)?).unwrap();
                for entry in (offset..offset + size).step_by(16) {
                    let tag = i64::from_le_bytes(at(entry, 8)?.try_into().unwrap());
                    if tag == DT_NULL {
                        break;
                    }
                    dynamic.push((tag, u64_at(entry + 8)?));
                }
            }
        }
        Ok(Elf {
            kind,
            machine,
            program_headers,
            dynamic,
        })
    }

    fn has(&self, p_type: u32) -> bool {
        self.program_headers.contains(&p_type)
    }

    fn tag(&self, tag: i64) -> Option<u64> {
        self.dynamic
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|(_, v)| *v)
    }
}

fn version_line(cmd: &mut Command) -> String {
    let out = cmd.arg("--version").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains(env!("CARGO_PKG_VERSION")),
        "{cmd:?}: {}, stdout {stdout:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Static PIE with its relative relocations packed as DT_RELR; it runs.
/// `runner` runs a binary of another architecture (qemu-aarch64-static).
fn assert_static_pie_with_relr(target: &str, machine: u16, runner: Option<PathBuf>) {
    assert_binary_is_static_pie_with_relr(
        &testenv::musl_binary_for(target),
        target,
        machine,
        runner,
    );
}

fn assert_binary_is_static_pie_with_relr(
    bin: &Path,
    target: &str,
    machine: u16,
    runner: Option<PathBuf>,
) {
    let elf = Elf::read(bin);
    assert_eq!(elf.machine, machine, "{target}");
    assert_eq!(
        elf.kind, ET_DYN,
        "{target}: ELF type {} (2 = EXEC: built with `-C relocation-model=static`)",
        elf.kind
    );
    assert!(
        !elf.has(PT_INTERP),
        "{target}: a PT_INTERP: dynamically linked, not a static PIE"
    );
    assert!(
        elf.has(PT_DYNAMIC),
        "{target}: a static PIE has a dynamic section"
    );
    assert_eq!(
        elf.tag(DT_FLAGS_1).map(|f| f & DF_1_PIE),
        Some(DF_1_PIE),
        "{target}: FLAGS_1 lacks PIE: {:x?}",
        elf.dynamic
    );
    assert_eq!(
        elf.tag(DT_NEEDED),
        None,
        "{target}: a DT_NEEDED: it needs a library"
    );
    assert_eq!(elf.tag(DT_TEXTREL), None, "{target}: relocations in .text");
    let relr = elf.tag(DT_RELRSZ).unwrap_or(0);
    assert!(
        elf.tag(DT_RELR).is_some() && relr > 0,
        "{target}: no DT_RELR: linked without -z pack-relative-relocs (build.rs): {:x?}",
        elf.dynamic
    );
    let rela = elf.tag(DT_RELASZ).unwrap_or(0);
    assert!(
        rela <= RELA_LIMIT,
        "{target}: {rela} B of RELA relocations (DT_RELA {:?}) beside {relr} B of RELR",
        elf.tag(DT_RELA)
    );
    // It relocates itself: rcrt1.o's _dlstart, and musl >= 1.2.4 applies
    // DT_RELR (Rust >= 1.93).
    let mut cmd = match runner {
        Some(r) => {
            let mut c = Command::new(r);
            c.arg(bin);
            c
        }
        None => Command::new(bin),
    };
    version_line(&mut cmd);
}

#[test]
fn x86_64_is_a_static_pie_with_relr_relocations() {
    assert_static_pie_with_relr("x86_64-unknown-linux-musl", EM_X86_64, None);
}

#[test]
fn aarch64_is_a_static_pie_with_relr_relocations() {
    let qemu = testenv::tool("qemu-aarch64-static", "qemu-user-static");
    assert_static_pie_with_relr("aarch64-unknown-linux-musl", EM_AARCH64, Some(qemu));
}

/// The controller's image binaries link the same way (controller/build.rs
/// includes the node crate's link/static_pie.rs): on aarch64 a build without
/// musl's rcrt1.o passes readelf's type check and dies of SIGSEGV at start,
/// which the run below catches.
#[test]
fn the_controller_binaries_are_static_pies_with_relr_relocations() {
    let qemu = testenv::tool("qemu-aarch64-static", "qemu-user-static");
    for (target, machine, runner) in [
        ("x86_64-unknown-linux-musl", EM_X86_64, None),
        ("aarch64-unknown-linux-musl", EM_AARCH64, Some(qemu)),
    ] {
        assert_binary_is_static_pie_with_relr(
            &testenv::controller_musl_binary_for(target),
            target,
            machine,
            runner,
        );
    }
}
