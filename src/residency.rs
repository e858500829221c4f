//! How much of the agent's own binary stays resident.
//!
//! A long-running agent touches little of its code once started, but the
//! kernel maps far more: each page fault on a file already in the page cache
//! maps the pages around it too (fault-around, 64 KiB by default), so the
//! start-up paths (flag parsing, logging set-up, the first observation)
//! leave most of the binary's text and read-only data resident — about
//! 3 MiB of the idle agent's 4.2 MiB (docs/developer/binary.md, "Memory").
//!
//! [`advise_own_image`] gives `madvise(2)` advice for the read-only and
//! executable mappings of the binary itself (never a writable one: those
//! hold its data). Only advice that keeps every page's content is offered
//! (see the SAFETY note). The advice is a hint: when it fails the agent
//! runs as before, so the caller logs and goes on.

use std::{fmt, io};

/// Advice for the binary's own read-only mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_RANDOM`: no readahead on a fault in these mappings.
    Random,
    /// `MADV_COLD`: the pages go to the inactive list; they stay mapped.
    Cold,
    /// `MADV_PAGEOUT`: the pages are reclaimed now (clean file pages: they
    /// are dropped and read again if used), unmapped from this process.
    Pageout,
}

impl Advice {
    fn flag(self) -> libc::c_int {
        match self {
            Advice::Random => libc::MADV_RANDOM,
            Advice::Cold => libc::MADV_COLD,
            Advice::Pageout => libc::MADV_PAGEOUT,
        }
    }
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Advice::Random => "MADV_RANDOM",
            Advice::Cold => "MADV_COLD",
            Advice::Pageout => "MADV_PAGEOUT",
        })
    }
}

/// Why advice could not be given.
#[derive(Debug, thiserror::Error)]
pub enum ResidencyError {
    #[error("cannot read /proc/self/maps: {0}")]
    Maps(io::Error),
    #[error("no mapping of /proc/self/maps holds this binary's code")]
    NoImage,
    #[error("madvise({advice}) of {start:#x}..{end:#x}: {errno}")]
    Madvise {
        advice: Advice,
        start: usize,
        end: usize,
        errno: nix::errno::Errno,
    },
}

/// One line of /proc/self/maps: its range, whether it is writable, and
/// its path (empty for an anonymous mapping).
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    start: usize,
    end: usize,
    writable: bool,
    path: &'a str,
}

fn parse_line(line: &str) -> Option<Mapping<'_>> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    // offset, device, inode; the path is the rest, after padding.
    let path = fields.nth(3).unwrap_or("").trim_start();
    Some(Mapping {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        writable: perms.as_bytes().get(1) == Some(&b'w'),
        path,
    })
}

/// The read-only mappings (text, read-only data) of the file that maps
/// `code`, an address in this binary's text.
fn image_ranges(maps: &str, code: usize) -> Result<Vec<(usize, usize)>, ResidencyError> {
    let mappings: Vec<Mapping<'_>> = maps.lines().filter_map(parse_line).collect();
    let own = mappings
        .iter()
        .find(|m| m.start <= code && code < m.end && !m.path.is_empty())
        .ok_or(ResidencyError::NoImage)?;
    Ok(mappings
        .iter()
        .filter(|m| m.path == own.path && !m.writable)
        .map(|m| (m.start, m.end))
        .collect())
}

/// Gives `advice` for every read-only mapping of this binary; returns the
/// bytes advised.
pub fn advise_own_image(advice: Advice) -> Result<usize, ResidencyError> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(ResidencyError::Maps)?;
    let code = advise_own_image as fn(Advice) -> Result<usize, ResidencyError> as usize;
    let mut advised = 0;
    for (start, end) in image_ranges(&maps, code)? {
        // SAFETY: [start, end) is a whole mapping of this process, read
        // from /proc/self/maps (page-aligned by construction) and not
        // writable, so no Rust reference can observe a change through it.
        // None of the three advice values changes content: MADV_RANDOM and
        // MADV_COLD are hints to readahead and reclaim; MADV_PAGEOUT drops
        // clean file pages (read again from the file) and writes anonymous
        // ones to swap or keeps them (the RELRO mapping's relocated pages
        // are anonymous, read-only since musl's mprotect). MADV_DONTNEED,
        // which would discard those relocations, is not among them.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice.flag()) };
        if rc != 0 {
            return Err(ResidencyError::Madvise {
                advice,
                start,
                end,
                errno: nix::errno::Errno::last(),
            });
        }
        advised += end - start;
    }
    Ok(advised)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0100000 r--p 00000000 08:01 1234                       /usr/bin/agent
55d0c0100000-55d0c0400000 r-xp 00100000 08:01 1234                       /usr/bin/agent
55d0c0400000-55d0c0410000 rw-p 00400000 08:01 1234                       /usr/bin/agent
55d0c0410000-55d0c0420000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 r-xp 00000000 08:01 99                         /lib/other.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7ffd00100000-7ffd00101000 r-xp 00000000 00:00 0
";

    #[test]
    fn the_read_only_mappings_of_the_file_holding_the_code() {
        assert_eq!(
            image_ranges(MAPS, 0x55d0_c020_0000).unwrap(),
            [
                (0x55d0_c000_0000, 0x55d0_c010_0000),
                (0x55d0_c010_0000, 0x55d0_c040_0000)
            ]
        );
        // Another file's code gives that file's ranges, never the agent's.
        assert_eq!(
            image_ranges(MAPS, 0x7f00_0000_0800).unwrap(),
            [(0x7f00_0000_0000, 0x7f00_0000_1000)]
        );
        // Anonymous code (a JIT page, the vDSO without a name) is not an image.
        assert!(matches!(
            image_ranges(MAPS, 0x7ffd_0010_0800),
            Err(ResidencyError::NoImage)
        ));
        assert!(matches!(
            image_ranges(MAPS, 0x1000),
            Err(ResidencyError::NoImage)
        ));
    }

    #[test]
    fn this_binary_can_be_advised() {
        assert!(advise_own_image(Advice::Random).unwrap() > 0);
    }
}
