//! Cache-line write-back, store fences and non-temporal copies, chosen at run time by `cpuid`.

use std::fmt;
use std::str::FromStr;

/// The instruction used to write a cache line back to the persistence domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushKind {
    /// `clwb`: writes back and keeps the line cached. Best where present.
    Clwb,
    /// `clflushopt`: writes back and evicts; weakly ordered, so cheap in batches.
    ClflushOpt,
    /// `clflush`: writes back and evicts, serialised; the fallback every x86-64 CPU has.
    Clflush,
    /// No write-back and no fence, for measuring what persistence costs. Never durable.
    None,
}

impl FlushKind {
    /// The best instruction this CPU offers: `clwb`, else `clflushopt`, else `clflush`.
    pub fn detect() -> FlushKind {
        detect_cpu()
    }

    /// `NOSEFS_FLUSH` (clwb, clflushopt, clflush, none) when it is set and valid, else
    /// [`FlushKind::detect`]. A value the CPU cannot execute falls back to detection.
    pub fn from_env_or_detect() -> FlushKind {
        let detected = FlushKind::detect();
        match std::env::var("NOSEFS_FLUSH")
            .ok()
            .map(|v| v.parse::<FlushKind>())
        {
            Some(Ok(kind)) if kind.is_supported() => kind,
            _ => detected,
        }
    }

    /// Whether this CPU can execute the instruction.
    pub fn is_supported(self) -> bool {
        match self {
            FlushKind::None => true,
            FlushKind::Clflush => cfg!(target_arch = "x86_64"),
            FlushKind::ClflushOpt => cpu_has(CpuFeature::ClflushOpt),
            FlushKind::Clwb => cpu_has(CpuFeature::Clwb),
        }
    }
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
        })
    }
}

impl FromStr for FlushKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "clwb" => Ok(FlushKind::Clwb),
            "clflushopt" => Ok(FlushKind::ClflushOpt),
            "clflush" => Ok(FlushKind::Clflush),
            "none" | "off" => Ok(FlushKind::None),
            other => Err(format!(
                "unknown flush instruction `{other}` (expected clwb, clflushopt, clflush or none)"
            )),
        }
    }
}

#[derive(Clone, Copy)]
enum CpuFeature {
    Clwb,
    ClflushOpt,
}

#[cfg(target_arch = "x86_64")]
fn cpu_has(feature: CpuFeature) -> bool {
    use std::arch::x86_64::__cpuid_count;
    // Leaf 7 exists only when leaf 0 reports it.
    let max_leaf = __cpuid_count(0, 0).eax;
    if max_leaf < 7 {
        return false;
    }
    let ebx = __cpuid_count(7, 0).ebx;
    match feature {
        CpuFeature::ClflushOpt => ebx & (1 << 23) != 0,
        CpuFeature::Clwb => ebx & (1 << 24) != 0,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has(_feature: CpuFeature) -> bool {
    false
}

fn detect_cpu() -> FlushKind {
    if cpu_has(CpuFeature::Clwb) {
        FlushKind::Clwb
    } else if cpu_has(CpuFeature::ClflushOpt) {
        FlushKind::ClflushOpt
    } else if cfg!(target_arch = "x86_64") {
        FlushKind::Clflush
    } else {
        FlushKind::None
    }
}

/// Writes back the cache line containing `line`.
///
/// # Safety
/// `line` must point into mapped memory; `kind` must be supported by this CPU.
#[inline]
pub(super) unsafe fn flush_line(kind: FlushKind, line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees `line` is mapped and `kind` is supported; these instructions
    // only write back a cache line and touch no Rust-visible state.
    unsafe {
        match kind {
            FlushKind::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
            FlushKind::ClflushOpt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => std::arch::x86_64::_mm_clflush(line),
            FlushKind::None => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kind, line);
}

/// A store fence (`sfence`), skipped when flushes are turned off.
#[inline]
pub(super) fn fence(kind: FlushKind) {
    if kind == FlushKind::None {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` is part of SSE, which every x86-64 CPU has; it only orders stores.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Copies `src` to `dst` with 16-byte non-temporal stores for the aligned middle, and ordinary
/// stores plus a write-back for the unaligned head and tail. Head and tail are each shorter than
/// 16 bytes and end or start on a 16-byte boundary, so each lies within one cache line. Returns
/// the number of lines flushed.
///
/// # Safety
/// `dst .. dst + src.len()` must be writable mapped memory that does not overlap `src`.
pub(super) unsafe fn copy_nt(kind: FlushKind, dst: *mut u8, src: &[u8]) -> u64 {
    let len = src.len();
    let head = (dst.align_offset(16)).min(len);
    let body = (len - head) / 16 * 16;
    let tail = len - head - body;
    let mut flushed = 0;
    // SAFETY: every pointer below stays within `dst .. dst + len` (the caller's range), and the
    // source slices are in bounds by construction of `head`, `body` and `tail`.
    unsafe {
        if head > 0 {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
            flush_line(kind, dst);
            flushed += 1;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            let mut i = 0;
            while i < body {
                let s = src.as_ptr().add(head + i).cast::<__m128i>();
                let d = dst.add(head + i).cast::<__m128i>();
                _mm_stream_si128(d, _mm_loadu_si128(s));
                i += 16;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        std::ptr::copy_nonoverlapping(src.as_ptr().add(head), dst.add(head), body);
        if tail > 0 {
            let t = dst.add(head + body);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(head + body), t, tail);
            flush_line(kind, t);
            flushed += 1;
        }
    }
    flushed
}
