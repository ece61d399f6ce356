//! CUDA C++ to PTX with NVRTC.
//!
//! libnvrtc is opened at first use. The loader's own search (`LD_LIBRARY_PATH`, the system
//! library path) comes first; when that finds nothing, the folders of
//! [`toolkit::nvrtc_lib_candidates`] are tried by full path (the builtins library first, so
//! NVRTC's own `dlopen` of it by soname finds the copy already loaded). Its absence is a typed
//! error, never cudarc's panic.

use crate::{RuntimeError, toolkit};
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A GPU architecture, `sm_90a`, `sm_80`, ...: `sm_` then two or three digits and an optional
/// `a`/`f` suffix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arch(String);

impl Arch {
    /// Parses `sm_NN[a|f]`.
    pub fn parse(s: &str) -> Result<Arch, RuntimeError> {
        let bad = || RuntimeError::BadArch(s.to_string());
        let rest = s.strip_prefix("sm_").ok_or_else(bad)?;
        let digits = rest.trim_end_matches(['a', 'f']);
        if !(2..=3).contains(&digits.len())
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || rest.len() - digits.len() > 1
        {
            return Err(bad());
        }
        Ok(Arch(s.to_string()))
    }

    /// `sm_90a`.
    pub fn sm(&self) -> &str {
        &self.0
    }

    /// The virtual architecture NVRTC compiles to PTX for: `compute_90a`.
    pub fn compute(&self) -> String {
        format!("compute_{}", &self.0[3..])
    }
}

impl Default for Arch {
    fn default() -> Arch {
        Arch("sm_90a".into())
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// PTX text produced by NVRTC, with NVRTC's log (warnings).
#[derive(Clone, Debug)]
pub struct Ptx {
    pub text: String,
    pub arch: Arch,
    pub log: String,
}

static PRELOADED: OnceLock<Result<Vec<libloading::Library>, String>> = OnceLock::new();

/// Makes libnvrtc loadable, searching the toolkit and the wheels when the loader cannot.
pub fn ensure_nvrtc() -> Result<(), RuntimeError> {
    // SAFETY: only dlopens candidate names and closes them again.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    let searched = toolkit::nvrtc_lib_candidates();
    let loaded = PRELOADED.get_or_init(|| {
        for dir in &searched {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            names.sort();
            let pick = |prefix: &str| {
                names.iter().find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
                })
            };
            let (Some(builtins), Some(nvrtc)) = (pick("libnvrtc-builtins.so"), pick("libnvrtc.so"))
            else {
                continue;
            };
            let mut libs = Vec::new();
            for p in [builtins, nvrtc] {
                // SAFETY: loading NVIDIA's libraries runs no initializers with preconditions.
                match unsafe { libloading::Library::new(p) } {
                    Ok(l) => libs.push(l),
                    Err(e) => return Err(format!("{}: {e}", p.display())),
                }
            }
            return Ok(libs);
        }
        Err("no libnvrtc.so in any searched folder".into())
    });
    match loaded {
        Ok(_) if unsafe { sys::is_culib_present() } => Ok(()),
        Ok(_) | Err(_) => {
            let mut searched: Vec<PathBuf> =
                vec![PathBuf::from("LD_LIBRARY_PATH and the system library path")];
            searched.extend(toolkit::nvrtc_lib_candidates());
            Err(RuntimeError::NotFound {
                what: format!(
                    "libnvrtc (set LD_LIBRARY_PATH or IRC_NVRTC_LIB_DIR){}",
                    match loaded {
                        Err(e) => format!(": {e}"),
                        Ok(_) => String::new(),
                    }
                ),
                searched,
            })
        }
    }
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), RuntimeError> {
    ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| RuntimeError::Nvrtc {
            log: format!("nvrtcVersion: {e:?}"),
        })?;
    Ok((major, minor))
}

/// The options every compile uses: C++17, the architecture, the header folders.
pub fn compile_options(arch: &Arch, include_dirs: &[PathBuf]) -> Vec<String> {
    let mut opts = vec![
        "-std=c++17".to_string(),
        format!("--gpu-architecture={}", arch.compute()),
    ];
    for d in include_dirs {
        opts.push(format!("--include-path={}", d.display()));
    }
    opts
}

/// Compiles one CUDA C++ source to PTX for `arch`, finding CUDA's headers with
/// [`toolkit::find_cuda_include`]. `name` is the file name NVRTC's messages use.
pub fn compile(source: &str, name: &str, arch: &Arch) -> Result<Ptx, RuntimeError> {
    let include = toolkit::find_cuda_include()?;
    let mut dirs = vec![include.clone()];
    dirs.extend(toolkit::extra_include_dirs(&include));
    compile_with(source, name, &compile_options(arch, &dirs), arch)
}

/// Compiles with explicit NVRTC options.
pub fn compile_with(
    source: &str,
    name: &str,
    options: &[String],
    arch: &Arch,
) -> Result<Ptx, RuntimeError> {
    ensure_nvrtc()?;
    let src = CString::new(source).map_err(|_| RuntimeError::BadSource("a NUL byte".into()))?;
    let cname =
        CString::new(name).map_err(|_| RuntimeError::BadSource("a NUL in its name".into()))?;
    let opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| RuntimeError::BadSource("a NUL in an option".into()))?;
    let prog = result::create_program(&src, Some(&cname)).map_err(|e| RuntimeError::Nvrtc {
        log: format!("nvrtcCreateProgram: {e:?}"),
    })?;
    struct Guard(sys::nvrtcProgram);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: created above and destroyed once.
            let _ = unsafe { result::destroy_program(self.0) };
        }
    }
    let prog = Guard(prog);
    // SAFETY: `prog.0` is a live program; the option strings outlive the call.
    let compiled = unsafe { result::compile_program(prog.0, &opts) };
    let log = unsafe { result::get_program_log(prog.0) }
        .map(|raw| c_chars_to_string(&raw))
        .unwrap_or_default();
    if let Err(e) = compiled {
        return Err(RuntimeError::Compile {
            what: format!("NVRTC ({e:?}) with {}", options.join(" ")),
            log,
        });
    }
    let raw = unsafe { result::get_ptx(prog.0) }.map_err(|e| RuntimeError::Nvrtc {
        log: format!("nvrtcGetPTX: {e:?}"),
    })?;
    Ok(Ptx {
        text: c_chars_to_string(&raw),
        arch: arch.clone(),
        log,
    })
}

fn c_chars_to_string(raw: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parse() {
        assert_eq!(Arch::parse("sm_90a").unwrap().compute(), "compute_90a");
        assert_eq!(Arch::parse("sm_80").unwrap().compute(), "compute_80");
        assert_eq!(Arch::parse("sm_100f").unwrap().compute(), "compute_100f");
        for bad in [
            "90",
            "sm_",
            "sm_9",
            "sm_90aa",
            "sm_x0",
            "compute_90",
            "sm_1000",
        ] {
            assert!(Arch::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options() {
        let o = compile_options(&Arch::default(), &[PathBuf::from("/inc")]);
        assert_eq!(
            o,
            [
                "-std=c++17",
                "--gpu-architecture=compute_90a",
                "--include-path=/inc"
            ]
        );
    }
}
