//! The driver's reader of ONNX external data (`irc_onnx::ExternalData`): the files a model's
//! large tensors are stored in, named relative to the model's directory.
//!
//! A location must stay inside that directory: an absolute path or a `..` component is refused
//! (a model file must not make irc read arbitrary files). Each file is opened once and read
//! at the tensor's offset; a range past the file's end is an error naming the file and its
//! size, checked before anything is allocated.

use irc_onnx::{ExternalData, ExternalRef};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// A reader of external data relative to `dir` (the model's directory).
pub fn reader(dir: PathBuf) -> ExternalData {
    let files: Mutex<HashMap<PathBuf, (File, u64)>> = Mutex::new(HashMap::new());
    ExternalData::new(move |r| {
        let path = resolve(&dir, &r.location)?;
        let mut files = files.lock().unwrap_or_else(|p| p.into_inner());
        if !files.contains_key(&path) {
            let f =
                File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let len = f
                .metadata()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                .len();
            files.insert(path.clone(), (f, len));
        }
        let Some((file, len)) = files.get_mut(&path) else {
            return Err(format!("cannot open {}", path.display()));
        };
        read_range(file, *len, &path, r)
    })
}

/// `location` joined to `dir`, refused when it could leave `dir`.
pub fn resolve(dir: &Path, location: &str) -> Result<PathBuf, String> {
    let p = Path::new(location);
    for c in p.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(
                    "the location has a '..' component; external data must lie in the model's directory or below it"
                        .into(),
                );
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(
                    "the location is an absolute path; external data must be named relative to the model's directory"
                        .into(),
                );
            }
        }
    }
    Ok(dir.join(p))
}

fn read_range(file: &mut File, len: u64, path: &Path, r: &ExternalRef) -> Result<Vec<u8>, String> {
    if r.offset > len {
        return Err(format!(
            "offset {} is past the end of {} ({len} bytes)",
            r.offset,
            path.display()
        ));
    }
    let n = match r.length {
        Some(n) if r.offset.checked_add(n).is_some_and(|end| end <= len) => n,
        Some(n) => {
            return Err(format!(
                "offset {} + length {n} runs past the end of {} ({len} bytes)",
                r.offset,
                path.display()
            ));
        }
        None => len - r.offset,
    };
    let n = usize::try_from(n).map_err(|_| format!("length {n} does not fit in memory"))?;
    let mut buf = vec![0u8; n];
    file.seek(SeekFrom::Start(r.offset))
        .and_then(|_| file.read_exact(&mut buf))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(buf)
}
